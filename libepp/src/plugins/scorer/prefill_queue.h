// Private: a per-endpoint fluid queue of prefill tokens (estimated-ttft-scorer, dynamo-kv-cost-scorer).
// A pick adds the tokens it will prefill on an endpoint; they drain at the endpoint's rate (the
// default, or one SetRate gave it) as time passes.
// Not thread-safe: the owning plugin guards it with its mutex.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace epp::plugins {

class PrefillQueues {
 public:
  explicit PrefillQueues(double tokens_per_s) : rate_(tokens_per_s) {}
  // Tokens still queued on `endpoint` at `now_us`.
  double Backlog(std::string_view endpoint, int64_t now_us) const {
    auto it = queues_.find(endpoint);
    return it == queues_.end() ? 0.0 : Drained(it->second, now_us);
  }
  void Add(const std::string& endpoint, double tokens, int64_t now_us) {
    Queue& q = Get(endpoint);
    q.tokens = Drained(q, now_us) + tokens;
    q.at_us = now_us;
  }
  // From `now_us` on, `endpoint` drains at `tokens_per_s` (what drained until then, at the old).
  void SetRate(const std::string& endpoint, double tokens_per_s, int64_t now_us) {
    Queue& q = Get(endpoint);
    q.tokens = Drained(q, now_us);
    q.at_us = std::max(q.at_us, now_us);
    q.rate = tokens_per_s;
  }
  double Rate(std::string_view endpoint) const {
    auto it = queues_.find(endpoint);
    return it == queues_.end() ? rate_ : it->second.rate;
  }
  void Forget(std::string_view endpoint) {
    auto it = queues_.find(endpoint);
    if (it != queues_.end()) queues_.erase(it);
  }

 private:
  struct Queue {
    double tokens = 0;
    int64_t at_us = 0;
    double rate = 0;
  };
  Queue& Get(const std::string& endpoint) {
    auto [it, added] = queues_.try_emplace(endpoint);
    if (added) it->second.rate = rate_;
    return it->second;
  }
  double Drained(const Queue& q, int64_t now_us) const {
    const double dt_s = static_cast<double>(std::max<int64_t>(0, now_us - q.at_us)) / 1e6;
    return std::max(0.0, q.tokens - dt_s * q.rate);
  }
  double rate_;
  std::map<std::string, Queue, std::less<>> queues_;
};

}  // namespace epp::plugins
