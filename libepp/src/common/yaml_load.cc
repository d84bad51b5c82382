#include "common/yaml_load.h"

#include <yaml-cpp/eventhandler.h>

#include <sstream>

namespace epp::internal {
namespace {

// Sees only where each document starts.
class DocumentStarts : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override { start = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

  YAML::Mark start;
};

}  // namespace

std::vector<YAML::Node> LoadAllDocuments(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts starts;
  int last_pos = -1;
  while (parser.HandleNextDocument(starts)) {
    if (starts.start.pos == last_pos) {
      const YAML::Mark m = starts.start;
      throw YAML::ParserException(m, m.pos >= 0 && static_cast<size_t>(m.pos) < text.size()
                                         ? "unexpected '" + text.substr(m.pos, 1) + "'"
                                         : "unexpected content");
    }
    last_pos = starts.start.pos;
  }
  return YAML::LoadAll(text);
}

}  // namespace epp::internal
