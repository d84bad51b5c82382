// The live decision log: the last N scheduling decisions of a running EPP with their explain
// trace (`eppctl serve --decision-log N`, served as JSON on /debug/decisions, read by `eppctl top`).
//
// Sampled when busy: at most `max_per_second` decisions a second are kept (the first ones of each
// second), so the trace is built only for those and the log costs nothing per request beyond a
// clock read and a counter above that rate. A decision holds request metadata (model, path,
// objective, sizes, x-request-id), never prompt text unless `include_prompt` is set.
//
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "epp/request.h"
#include "epp/scheduler.h"

namespace epp {

struct DecisionLogOptions {
  size_t capacity = 1000;     // decisions kept (the oldest go first)
  int max_per_second = 50;    // decisions kept per second at most; the rest are counted only
  bool include_prompt = false;  // keep the prompt's first 4 KiB (sensitive: off by default)
};

struct DecisionRecord {
  uint64_t id = 0;            // 1, 2, ... in the order decisions were kept
  int64_t unix_ms = 0;
  std::string request_id;     // x-request-id when the gateway sent one
  std::string model, path, objective;
  int priority = 0;
  std::string fairness_id;    // InferenceRequest::fairness_id; empty when the request named none
  bool stream = false;
  size_t prompt_chars = 0;
  int64_t prompt_tokens = 0;
  int status = 0;             // 200, 429, 503
  std::string dropped_reason;  // PickResult::dropped_reason (429 and 503)
  std::vector<std::string> endpoints;  // primary first
  std::string reason;
  int candidates = 0;
  int prefix_blocks = 0, prefix_match_blocks = 0;
  // PickResult's latency prediction for the primary endpoint (-1: none) and the request's SLOs
  // (0: none), in milliseconds.
  double predicted_ttft_ms = -1, predicted_tpot_ms = -1, slo_ttft_ms = 0, slo_tpot_ms = 0;
  int64_t pick_us = 0;        // parse + schedule
  int64_t queue_wait_us = -1; // time waiting in flow control before the pick; -1: not queued
  DecisionSummary summary;    // winner, runner-up, the deciding scorer
  std::string explain_json;   // PickResultToJson (no prompt text)
  std::string explain_text;   // PickResultToText, uncoloured
  std::string prompt;         // only with DecisionLogOptions::include_prompt
};

// A record of one decision (id and time are set by DecisionLog::Add). `headers` are the request's
// (lower-cased names).
DecisionRecord MakeDecisionRecord(const InferenceRequest& request, const PickResult& result,
                                  const std::vector<std::pair<std::string, std::string>>& headers, int64_t pick_us,
                                  bool include_prompt);

class DecisionLog {
 public:
  explicit DecisionLog(DecisionLogOptions options);
  const DecisionLogOptions& options() const { return options_; }
  // Counts a decision about to be made; true when it is to be kept (build its trace, then Add).
  bool Admit();
  void Add(DecisionRecord record);
  // Up to `limit` of the newest decisions with id > after_id, oldest first.
  std::vector<DecisionRecord> Recent(size_t limit, uint64_t after_id = 0) const;
  std::optional<DecisionRecord> Find(uint64_t id) const;
  uint64_t seen() const;  // decisions counted by Admit
  uint64_t kept() const;  // decisions added

  // /debug/decisions: {"capacity", "max_per_second", "seen", "kept", "decisions": [summary...]}
  // (summaries without the explain trace), and one decision with it ({"decision": {..., "explain":
  // {...}, "explain_text": "..."}}); nullopt for an id not (or no longer) held.
  std::string ListJson(size_t limit, uint64_t after_id) const;
  std::optional<std::string> DecisionJson(uint64_t id) const;

 private:
  DecisionLogOptions options_;
  mutable std::mutex mu_;
  std::deque<DecisionRecord> records_;
  uint64_t next_id_ = 1, seen_ = 0;
  int64_t window_s_ = -1;
  int window_count_ = 0;
};

}  // namespace epp
