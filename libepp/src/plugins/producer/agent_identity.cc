// agent-identity: the session id an AI coding agent sends on every turn, published as the request
// attribute "agent-identity/" (kAgentIdentityAttribute). The scheduler makes it the request's
// fairness id when no x-llm-d-inference-fairness-id header names one (Scheduler::PrepareRequest,
// PickResult::fairness_id), so every turn of an agent session queues under one flow-control
// tenant; session affinity reads it through a source {attribute: agent-identity}.
// Facts: llm-d-router's requestcontrol/requestheader/agentidentity and its Director.
#include "absl/strings/ascii.h"
#include "epp/scheduling.h"
#include "plugins/producer/producer.h"

namespace epp::plugins {
namespace {

struct AgentIdentityOptions {
  std::vector<std::string> additional;  // additionalSessionHeaders, lower case
};

// The built-in headers, after the configured ones, in llm-d's order: Claude Code, OpenCode,
// Codex, and Codex's older underscored spelling.
constexpr std::string_view kDefaultSessionHeaders[] = {"x-claude-code-session-id", "x-session-affinity", "session-id",
                                                       "session_id"};

const ParamTable<AgentIdentityOptions>& Table() {
  static const auto* t = &(*new ParamTable<AgentIdentityOptions>())
                              .StringList("additionalSessionHeaders", &AgentIdentityOptions::additional,
                                          "headers checked before the built-in x-claude-code-session-id, "
                                          "x-session-affinity, session-id, session_id; the first non-empty one wins");
  return *t;
}

class AgentIdentity : public Plugin, public RequestHeaderProcessor {
 public:
  AgentIdentity(TypedName tn, AgentIdentityOptions o) : Plugin(std::move(tn)), o_(std::move(o)) {
    headers_ = o_.additional;
    for (std::string_view h : kDefaultSessionHeaders) headers_.emplace_back(h);
  }
  const RequestHeaderProcessor* AsRequestHeaderProcessor() const override { return this; }
  Params EffectiveParams() const override { return Table().Effective(o_); }

  void RequestHeader(const InferenceRequest& request, RequestAttributes& attributes) const override {
    for (const std::string& h : headers_) {
      std::optional<std::string_view> v = request.header(h);
      if (v && !v->empty()) {
        attributes.Set(kAgentIdentityAttribute, std::string(*v));
        return;
      }
    }
  }

 private:
  AgentIdentityOptions o_;
  std::vector<std::string> headers_;  // the order they are tried in
};

}  // namespace

PluginOr CreateAgentIdentity(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(AgentIdentityOptions o, Table().Read(params));
  // Header names compare lower case; empty entries never match (llm-d keeps them too).
  for (std::string& h : o.additional) h = absl::AsciiStrToLower(h);
  return std::make_unique<AgentIdentity>(TN(kAgentIdentityType, name), std::move(o));
}

PluginSchema AgentIdentitySchema() { return Table().Schema(); }

}  // namespace epp::plugins
