// Kubernetes manifests (untrusted: any YAML a user points eppctl lint at) through the linter.
// Invariants: no crash or hang on any input; every finding names a known rule, a severity and
// the file; the three formatters accept every report (JSON and SARIF parse back).
#include <set>
#include <string>

#include "epp/tools/lint.h"
#include "fuzz_util.h"
#include "nlohmann/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::set<std::string> rules = [] {
    std::set<std::string> s;
    for (const epp::LintRule& r : epp::LintRules()) s.insert(r.id);
    return s;
  }();
  const epp::LintReport r = epp::LintText(epp::fuzz::Text(data, size), "fuzz.yaml");
  for (const epp::LintFinding& f : r.findings) {
    EPP_FUZZ_CHECK(rules.count(f.rule) == 1, f.rule);
    EPP_FUZZ_CHECK(f.file == "fuzz.yaml", f.file);
  }
  (void)epp::FormatLintText(r);
  EPP_FUZZ_CHECK(!nlohmann::json::parse(epp::FormatLintJson(r), nullptr, false).is_discarded(), "JSON output parses");
  EPP_FUZZ_CHECK(!nlohmann::json::parse(epp::FormatLintSarif(r), nullptr, false).is_discarded(), "SARIF output parses");
  return 0;
}
