// `eppctl top`: a live view of a running EPP from its metrics port: the pool's endpoints (queue,
// running, KV, in flight, picks per second, prefix hit rate, scrape age and errors) from
// `/metrics`, the flow-control layer's queues when serve runs one (featureGates [flowControl]:
// llm-d's llm_d_epp_flow_control_* series), and the latest decisions (winner, runner-up, the
// deciding scorer) from `/debug/decisions` (serve --decision-log).
//
// TopModel turns successive polls into rates; RenderTop draws one frame as plain text lines of a
// given size (the CLI adds the terminal handling). Both are pure: tests feed them text.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "epp/status.h"

namespace epp {

struct TopEndpoint {
  std::string address;
  std::optional<double> waiting, running, kv_cache, metrics_age_s;
  bool fresh = false, unreachable = false;
  double inflight = 0;
  int64_t scrape_errors = 0;
  int64_t picks_total = 0;
  double picks_per_s = 0;            // between the last two polls (0 after the first)
  // Matched / hashed prefix blocks of the picks between the last two polls; without any, since start.
  std::optional<double> prefix_hit;
};

struct TopDecision {
  uint64_t id = 0;
  int64_t unix_ms = 0;
  std::string model, request_id;
  int status = 0;
  std::string endpoint, runner_up, deciding_scorer, kind, reason;
  double winner_score = 0, runner_up_score = 0;
  int64_t pick_us = 0;
  int prefix_blocks = 0, prefix_match_blocks = 0;
};

// The flow-control layer, from llm-d's llm_d_epp_flow_control_* series. Text that came from a
// label (flow ids are chosen by clients, outcome names) is sanitized for a terminal: control
// characters, escapes and bytes that are not UTF-8 are '?'.
struct TopFlowBand {
  int priority = 0;
  int64_t queued = 0;  // requests held: the sum of the band's flows' queue_size
  int64_t bytes = 0;   // and of their queue_bytes
  // Fractions of the band's own request and byte limits occupied (capacity_utilization_*).
  std::optional<double> requests_used, bytes_used;
};

struct TopFlow {
  std::string id;  // the fairness id (tenant), sanitized
  int priority = 0;
  int64_t queued = 0, bytes = 0;
};

struct TopFlowOutcome {
  std::string outcome;  // the `outcome` label: Dispatched, RejectedCapacity, EvictedTTL, ...
  int64_t total = 0;    // requests_total summed over the bands, cumulative
  double per_s = 0;     // between the last two polls (0 after the first)
};

struct TopFlowControl {
  std::vector<TopFlowBand> bands;  // highest priority first
  std::vector<TopFlow> flows;      // longest queue first (then bytes, band, id); empty flows are not exported
  int64_t queued = 0, bytes = 0;   // the whole layer
  // Fractions of the layer's global limits occupied; nullopt when the limit is not set (serve
  // exports global_capacity_utilization_* only then).
  std::optional<double> requests_used, bytes_used;
  // pool_saturation by stage: the effective one gating dispatch (1 is the set point) and the
  // prefill and decode stages when the pool has endpoints of that role.
  std::optional<double> saturation, prefill_saturation, decode_saturation;
  std::vector<TopFlowOutcome> outcomes;  // by outcome name; Dispatched included
  // Time dispatched requests waited in the layer, from the queue-duration histogram (cumulative);
  // nullopt before any was dispatched.
  std::optional<double> wait_p50_s, wait_p99_s;
};

struct TopState {
  std::vector<TopEndpoint> endpoints;
  std::vector<TopDecision> decisions;  // newest last
  // The flow-control layer; nullopt when the metrics have no llm_d_epp_flow_control_* sample.
  std::optional<TopFlowControl> flow_control;
  double requests_per_s = 0;           // ext_proc requests of any outcome, between the last two polls
  std::map<std::string, int64_t> outcomes;  // epp_requests_total by outcome, cumulative
  int64_t streams_active = 0;
  double pick_p50_us = 0, pick_p99_us = 0;  // from the pick-latency histogram (cumulative)
  std::string version;
  std::string decisions_note;  // why no decisions are shown (log off, unreachable), or ""
  uint64_t decisions_seen = 0, decisions_kept = 0;
  int polls = 0;
};

class TopModel {
 public:
  // One poll at `now_s` (any monotonic clock): the /metrics text, and the /debug/decisions JSON
  // (or, when it could not be read, `decisions_error` saying why). kInvalidArgument when the
  // metrics text does not parse or is not an EPP's (no epp_requests_total); the state stays.
  absl::Status Update(std::string_view metrics_text, std::string_view decisions_json, std::string_view decisions_error,
                      double now_s);
  const TopState& state() const { return state_; }

 private:
  TopState state_;
  double last_s_ = 0;
  int64_t last_requests_ = 0;
  struct Counts {
    int64_t picks = 0, blocks = 0, matched = 0;
  };
  std::map<std::string, Counts> last_;
  std::map<std::string, int64_t> last_flow_outcomes_;  // flow-control requests_total by outcome
  std::map<uint64_t, TopDecision> decisions_;  // by id, bounded
};

enum class TopSort { kAddress, kQueue, kKvCache, kInflight, kPicks };
std::string_view TopSortName(TopSort s);

struct TopView {
  TopSort sort = TopSort::kAddress;
  bool descending = false;
  int selected = 0;      // decision row, 0 = newest
  std::string detail;    // when non-empty: one decision's full explanation replaces the tables
  std::string target;    // shown in the title
  std::string error;     // the last poll's failure, shown in the status line
};

// One frame: exactly `height` lines of at most `width` characters, joined with '\n'. The
// flow-control section (after the endpoints, before the decisions) is drawn only when
// `state.flow_control` is set. Every line is sanitized for a terminal (see TopFlowControl).
std::string RenderTop(const TopState& state, const TopView& view, int width, int height);

}  // namespace epp
