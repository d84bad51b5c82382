// The out-of-line parts of the extension points (epp/scheduling.h). The contract is abstract
// classes and plain structs; what little code it has lives here so the header's name leads to it.
#include "epp/scheduling.h"

namespace epp {

std::string_view ScorerCategoryName(ScorerCategory category) {
  switch (category) {
    case ScorerCategory::kAffinity:
      return "affinity";
    case ScorerCategory::kDistribution:
      return "distribution";
    case ScorerCategory::kBalance:
      return "balance";
  }
  return "unknown";
}

}  // namespace epp
