// The live decision log (epp/runtime/decision_log.h).
#include "epp/runtime/decision_log.h"

#include <algorithm>
#include <chrono>

#include <nlohmann/json.hpp>

#include "common/json.h"
#include "epp/runtime/extproc.h"

namespace epp {
namespace {

using json = nlohmann::ordered_json;
constexpr size_t kPromptKeep = 4096;

json SummaryJson(const DecisionRecord& r) {
  json j = {{"id", r.id},
            {"unix_ms", r.unix_ms},
            {"request_id", r.request_id},
            {"model", r.model},
            {"path", r.path},
            {"objective", r.objective},
            {"priority", r.priority},
            {"fairness_id", r.fairness_id},
            {"stream", r.stream},
            {"prompt_chars", r.prompt_chars},
            {"prompt_tokens", r.prompt_tokens},
            {"status", r.status},
            {"dropped_reason", r.dropped_reason},
            {"endpoint", r.endpoints.empty() ? json(nullptr) : json(r.endpoints.front())},
            {"fallbacks", r.endpoints.size() > 1 ? json(std::vector<std::string>(r.endpoints.begin() + 1, r.endpoints.end()))
                                                 : json::array()},
            {"reason", r.reason},
            {"candidates", r.candidates},
            {"prefix_blocks", r.prefix_blocks},
            {"prefix_match_blocks", r.prefix_match_blocks},
            {"pick_us", r.pick_us}};
  if (r.queue_wait_us >= 0) j["queue_wait_us"] = r.queue_wait_us;
  if (r.predicted_ttft_ms >= 0) j["predicted_ttft_ms"] = r.predicted_ttft_ms;
  if (r.predicted_tpot_ms >= 0) j["predicted_tpot_ms"] = r.predicted_tpot_ms;
  if (r.slo_ttft_ms > 0) j["slo_ttft_ms"] = r.slo_ttft_ms;
  if (r.slo_tpot_ms > 0) j["slo_tpot_ms"] = r.slo_tpot_ms;
  const DecisionSummary& d = r.summary;
  json s = {{"kind", d.kind}};
  if (!d.kind.empty()) {
    s["winner"] = d.winner;
    s["winner_score"] = d.winner_score;
    if (d.kind != "alone") {
      s["runner_up"] = d.runner_up;
      s["runner_up_score"] = d.runner_up_score;
    }
    if (d.kind == "margin") {
      s["deciding_scorer"] = d.deciding_scorer;
      s["deciding_weighted"] = {d.deciding_winner, d.deciding_runner_up};
    }
  }
  j["summary"] = std::move(s);
  if (!r.prompt.empty()) j["prompt"] = r.prompt;
  return j;
}

}  // namespace

DecisionRecord MakeDecisionRecord(const InferenceRequest& request, const PickResult& result,
                                  const std::vector<std::pair<std::string, std::string>>& headers, int64_t pick_us,
                                  bool include_prompt) {
  DecisionRecord r;
  for (const auto& [k, v] : headers) {
    if (k == "x-request-id" && r.request_id.empty()) r.request_id = v;
    // llm-d's header wins over its old alias wherever the two appear.
    if (k == kLlmdObjectiveHeader) r.objective = v;
    if (k == kObjectiveHeader && r.objective.empty()) r.objective = v;
  }
  r.fairness_id = result.fairness_id.empty() ? request.fairness_id : result.fairness_id;
  r.dropped_reason = result.dropped_reason;
  r.model = request.model;
  r.path = request.path;
  r.priority = request.priority;
  r.stream = request.stream;
  r.prompt_chars = request.prompt.size();
  r.prompt_tokens = request.prompt_tokens;
  r.status = result.status;
  r.endpoints = result.endpoints;
  r.reason = result.reason;
  r.candidates = result.candidates;
  r.prefix_blocks = result.prefix_blocks;
  r.prefix_match_blocks = result.prefix_match_blocks;
  r.predicted_ttft_ms = result.predicted_ttft_ms;
  r.predicted_tpot_ms = result.predicted_tpot_ms;
  r.slo_ttft_ms = result.slo_ttft_ms;
  r.slo_tpot_ms = result.slo_tpot_ms;
  r.pick_us = pick_us;
  r.summary = SummarizeDecision(result);
  r.explain_json = PickResultToJson(&request, result, -1);
  r.explain_text = PickResultToText(&request, result, false);
  if (include_prompt) r.prompt = request.prompt.substr(0, kPromptKeep);
  return r;
}

DecisionLog::DecisionLog(DecisionLogOptions options) : options_(options) {
  if (options_.capacity == 0) options_.capacity = 1;
  if (options_.max_per_second < 1) options_.max_per_second = 1;
}

bool DecisionLog::Admit() {
  const int64_t now_s =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  std::lock_guard<std::mutex> lock(mu_);
  ++seen_;
  if (now_s != window_s_) {
    window_s_ = now_s;
    window_count_ = 0;
  }
  if (window_count_ >= options_.max_per_second) return false;
  ++window_count_;
  return true;
}

void DecisionLog::Add(DecisionRecord record) {
  record.unix_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::lock_guard<std::mutex> lock(mu_);
  record.id = next_id_++;
  records_.push_back(std::move(record));
  while (records_.size() > options_.capacity) records_.pop_front();
}

std::vector<DecisionRecord> DecisionLog::Recent(size_t limit, uint64_t after_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DecisionRecord> out;
  if (records_.empty()) return out;
  // Ids are consecutive in the deque: the first one above after_id sits at a known index.
  size_t first = 0;
  if (after_id >= records_.front().id) first = std::min<uint64_t>(records_.size(), after_id - records_.front().id + 1);
  const size_t start = std::max(first, records_.size() > limit ? records_.size() - limit : size_t{0});
  for (size_t i = start; i < records_.size(); ++i) out.push_back(records_[i]);
  return out;
}

std::optional<DecisionRecord> DecisionLog::Find(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (records_.empty() || id < records_.front().id || id > records_.back().id) return std::nullopt;
  return records_[id - records_.front().id];  // ids are consecutive within the deque
}

uint64_t DecisionLog::seen() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seen_;
}

uint64_t DecisionLog::kept() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_id_ - 1;
}

std::string DecisionLog::ListJson(size_t limit, uint64_t after_id) const {
  json j = {{"capacity", options_.capacity},
            {"max_per_second", options_.max_per_second},
            {"include_prompt", options_.include_prompt},
            {"seen", seen()},
            {"kept", kept()}};
  json list = json::array();
  for (const DecisionRecord& r : Recent(limit, after_id)) list.push_back(SummaryJson(r));
  j["decisions"] = std::move(list);
  return internal::DumpJsonLossy(j, -1);
}

std::optional<std::string> DecisionLog::DecisionJson(uint64_t id) const {
  std::optional<DecisionRecord> r = Find(id);
  if (!r) return std::nullopt;
  json d = SummaryJson(*r);
  json explain = json::parse(r->explain_json, nullptr, false);
  d["explain"] = explain.is_discarded() ? json(nullptr) : std::move(explain);
  d["explain_text"] = r->explain_text;
  return internal::DumpJsonLossy(json{{"decision", std::move(d)}}, -1);
}

}  // namespace epp
