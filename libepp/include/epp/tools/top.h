// `eppctl top`: a live view of a running EPP from its metrics port: the pool's endpoints (queue,
// running, KV, in flight, picks per second, prefix hit rate, scrape age and errors) from
// `/metrics`, and the latest decisions (winner, runner-up, the deciding scorer) from
// `/debug/decisions` (serve --decision-log).
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

struct TopState {
  std::vector<TopEndpoint> endpoints;
  std::vector<TopDecision> decisions;  // newest last
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

// One frame: exactly `height` lines of at most `width` characters, joined with '\n'.
std::string RenderTop(const TopState& state, const TopView& view, int width, int height);

}  // namespace epp
