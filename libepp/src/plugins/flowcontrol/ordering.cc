// The ordering policies: fcfs-ordering-policy (arrival at flow control), edf-ordering-policy
// (enqueue time + TTL) and slo-deadline-ordering-policy (receive time + the TTFT SLO header).
// Each maps an item to its key once, when it is queued (policies.h says why).
#include <limits>

#include "flowcontrol/policies.h"
#include "plugins/flowcontrol/flowcontrol.h"

namespace epp::plugins {
namespace {

using flowcontrol::kNoDeadline;
using flowcontrol::OrderingKey;
using flowcontrol::OrderingPolicy;
using flowcontrol::QueuedItem;

// base + delta, kNoDeadline when it would not fit.
int64_t DeadlineAt(int64_t base, int64_t delta) {
  return base > kNoDeadline - delta ? kNoDeadline : base + delta;
}

// Earliest logical enqueue time first.
class FcfsOrdering : public Plugin, public OrderingPolicy {
 public:
  explicit FcfsOrdering(TypedName tn) : Plugin(std::move(tn)) {}
  OrderingKey Key(const QueuedItem& item) const override { return {item.enqueue_us, 0, item.seq}; }
};

// Earliest deadline (enqueue + effective TTL) first, then earliest enqueue; an item without a
// TTL has no deadline and sorts after every item that has one.
class EdfOrdering : public Plugin, public OrderingPolicy {
 public:
  explicit EdfOrdering(TypedName tn) : Plugin(std::move(tn)) {}
  OrderingKey Key(const QueuedItem& item) const override {
    const int64_t deadline = item.ttl_us > 0 ? DeadlineAt(item.enqueue_us, item.ttl_us) : kNoDeadline;
    return {deadline, item.enqueue_us, item.seq};
  }
};

// Earliest SLO deadline (receive time + x-llm-d-slo-ttft-ms) first, then earliest receive time;
// a request without a valid SLO header sorts after every request with one.
class SloDeadlineOrdering : public Plugin, public OrderingPolicy {
 public:
  explicit SloDeadlineOrdering(TypedName tn) : Plugin(std::move(tn)) {}
  OrderingKey Key(const QueuedItem& item) const override {
    const int64_t deadline = item.slo_ttft_ms >= 0 ? DeadlineAt(item.received_us, item.slo_ttft_ms * 1000) : kNoDeadline;
    return {deadline, item.received_us, item.seq};
  }
};

}  // namespace

PluginOr CreateFcfsOrdering(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<FcfsOrdering>(TN(kFcfsOrderingType, name));
}

PluginOr CreateEdfOrdering(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<EdfOrdering>(TN(kEdfOrderingType, name));
}

PluginOr CreateSloDeadlineOrdering(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<SloDeadlineOrdering>(TN(kSloDeadlineOrderingType, name));
}

}  // namespace epp::plugins
