// Locality and capacity plugins (locality.h; formulas and parameters in docs/scheduling.md and
// docs/multicluster.md).
//
//   capacity-filter          keeps endpoints whose configured capacity (EndpointCapacity) has
//                            room for this request in the sliding window; as an admitter it
//                            answers 429 when no candidate has room. It counts every pick.
//   capacity-scorer          headroom: 1 - the larger used fraction of the endpoint's limits.
//   region-spillover-filter  keeps the home region's unsaturated endpoints; when it has none, the
//                            next region's in spill-over order, and so on; when every region is
//                            saturated, every available endpoint.
//   region-rtt-scorer        1 - RTT(home, region) / maxRttMs from a configured matrix.
//   zone-preference-scorer   1 for candidates in the gateway's zone (request header or config).
//
// The capacity window is a log of (time, tokens) per endpoint: exact over the window, O(picks in
// the window) memory, trimmed on every read and write. Picks that run concurrently can each see
// the same last free slot (a filter and the pick's PreRequest are separate steps), so under
// concurrency the window can exceed a limit by at most the number of picks in flight at once.
#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/strings.h"
#include "epp/metrics.h"
#include "epp/request.h"
#include "epp/scheduling.h"
#include "plugins/locality/locality.h"

namespace epp::plugins {
namespace {

using internal::Num;

// ---- shared helpers

std::optional<std::string> LabelOf(const Endpoint& e, const std::string& label, std::string_view fallback) {
  if (auto it = e.labels.find(label); it != e.labels.end() && !it->second.empty()) return it->second;
  if (label == kRegionLabel || label == kZoneLabel) {
    if (auto it = e.labels.find(std::string(fallback)); it != e.labels.end() && !it->second.empty()) return it->second;
  }
  return std::nullopt;
}

std::string RegionOf(const Endpoint& e, const std::string& label) {
  return LabelOf(e, label, kKubeRegionLabel).value_or("");
}

int64_t RequestTokens(const SchedulingContext& ctx) { return ctx.request ? std::max<int64_t>(0, ctx.request->prompt_tokens) : 0; }

// Picks per endpoint over the last `window_us`.
class PickWindow {
 public:
  explicit PickWindow(int64_t window_us) : window_us_(window_us) {}
  struct Use {
    int64_t requests = 0;
    int64_t tokens = 0;
  };
  Use Used(const std::string& endpoint, int64_t now_us) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = log_.find(endpoint);
    if (it == log_.end()) return {};
    Trim(it->second, now_us);
    return it->second.use;
  }
  void Add(const std::string& endpoint, int64_t now_us, int64_t tokens) const {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = log_[endpoint];
    Trim(e, now_us);
    e.picks.emplace_back(now_us, tokens);
    e.use.requests++;
    e.use.tokens += tokens;
  }
  void Forget(std::string_view endpoint) const {
    std::lock_guard<std::mutex> lock(mu_);
    log_.erase(std::string(endpoint));
  }
  int64_t window_us() const { return window_us_; }
  double window_s() const { return static_cast<double>(window_us_) / 1e6; }

 private:
  struct Entry {
    std::deque<std::pair<int64_t, int64_t>> picks;  // (time, tokens), oldest first
    Use use;
  };
  void Trim(Entry& e, int64_t now_us) const {
    while (!e.picks.empty() && e.picks.front().first <= now_us - window_us_) {
      e.use.requests--;
      e.use.tokens -= e.picks.front().second;
      e.picks.pop_front();
    }
  }
  const int64_t window_us_;
  mutable std::mutex mu_;
  mutable std::map<std::string, Entry, std::less<>> log_;
};

// The window's share of each limit: limits are per second, the window may be longer or shorter.
struct Room {
  double request_limit = INFINITY, token_limit = INFINITY;  // in the window
  PickWindow::Use used;
  // Largest used fraction of a limit (0 unlimited).
  double UsedFraction() const {
    double f = 0;
    if (std::isfinite(request_limit)) f = std::max(f, static_cast<double>(used.requests) / request_limit);
    if (std::isfinite(token_limit)) f = std::max(f, static_cast<double>(used.tokens) / token_limit);
    return f;
  }
  bool Fits(int64_t tokens) const {
    return static_cast<double>(used.requests + 1) <= request_limit + 1e-9 &&
           static_cast<double>(used.tokens + tokens) <= token_limit + 1e-9;
  }
  std::string Describe(double window_s) const {
    std::vector<std::string> parts;
    if (std::isfinite(request_limit)) parts.push_back(absl::StrCat(used.requests, " of ", Num(request_limit), " requests"));
    if (std::isfinite(token_limit)) parts.push_back(absl::StrCat(used.tokens, " of ", Num(token_limit), " tokens"));
    return absl::StrCat(absl::StrJoin(parts, ", "), " in the last ", Num(window_s), " s");
  }
};

Room RoomOf(const PickWindow& w, const Endpoint& e, int64_t now_us) {
  Room r;
  if (e.capacity.requests_per_second) r.request_limit = *e.capacity.requests_per_second * w.window_s();
  if (e.capacity.tokens_per_second) r.token_limit = *e.capacity.tokens_per_second * w.window_s();
  if (e.capacity.limited()) r.used = w.Used(e.address, now_us);
  return r;
}

int64_t MillisToMicros(double ms) { return static_cast<int64_t>(std::llround(ms * 1000.0)); }

// The capacity plugins' one parameter: the window capacity limits are counted over.
struct WindowOptions {
  double window_ms = 1000;
};

const ParamTable<WindowOptions>& WindowTable() {
  static const auto* t = &(*new ParamTable<WindowOptions>())
                              .Number("windowMs", &WindowOptions::window_ms, Range::Closed(1, 3'600'000),
                                      "milliseconds over which picks are counted against an endpoint's capacity");
  return *t;
}

Params WindowEffective(int64_t window_us) { return WindowTable().Effective(WindowOptions{static_cast<double>(window_us) / 1000.0}); }

// ---- capacity-filter

class CapacityFilter : public Plugin, public Filter, public Admitter, public RequestObserver, public EndpointState {
 public:
  CapacityFilter(TypedName tn, int64_t window_us) : Plugin(std::move(tn)), window_(window_us) {}
  const Filter* AsFilter() const override { return this; }
  const Admitter* AsAdmitter() const override { return this; }
  const RequestObserver* AsRequestObserver() const override { return this; }
  Params EffectiveParams() const override { return WindowEffective(window_.window_us()); }

  std::vector<const Endpoint*> Apply(const SchedulingContext& ctx, Candidates candidates) const override {
    std::vector<const Endpoint*> out;
    const int64_t tokens = RequestTokens(ctx);
    for (const Endpoint* e : candidates)
      if (!e->capacity.limited() || RoomOf(window_, *e, ctx.now_us).Fits(tokens)) out.push_back(e);
    return out;
  }
  std::string WhyRemoved(const SchedulingContext& ctx, const Endpoint& e) const override {
    return absl::StrCat("at its capacity limit: ", RoomOf(window_, e, ctx.now_us).Describe(window_.window_s()));
  }
  bool RemovesBusyEndpoints() const override { return true; }
  bool Admit(const SchedulingContext& ctx, Candidates candidates, std::string& why) const override {
    if (candidates.empty()) return true;  // nothing to protect; the scheduler answers 503
    const int64_t tokens = RequestTokens(ctx);
    std::vector<std::string> full;
    for (const Endpoint* e : candidates) {
      if (!e->capacity.limited()) return true;
      const Room r = RoomOf(window_, *e, ctx.now_us);
      if (r.Fits(tokens)) return true;
      if (full.size() < 4) full.push_back(absl::StrCat(e->address, " (", r.Describe(window_.window_s()), ")"));
    }
    why = absl::StrCat("every endpoint is at its capacity limit: ", absl::StrJoin(full, "; "),
                       candidates.size() > full.size() ? "; ..." : "");
    return false;
  }
  void PreRequest(const SchedulingContext& ctx, const Endpoint& picked) const override {
    if (picked.capacity.limited()) window_.Add(picked.address, ctx.now_us, RequestTokens(ctx));
  }
  void ForgetEndpoint(std::string_view endpoint) const override { window_.Forget(endpoint); }

 private:
  PickWindow window_;
};

// ---- capacity-scorer

class CapacityScorer : public Plugin, public Scorer, public RequestObserver, public EndpointState {
 public:
  CapacityScorer(TypedName tn, int64_t window_us) : Plugin(std::move(tn)), window_(window_us) {}
  const Scorer* AsScorer() const override { return this; }
  const RequestObserver* AsRequestObserver() const override { return this; }
  ScorerCategory category() const override { return ScorerCategory::kDistribution; }
  Params EffectiveParams() const override { return WindowEffective(window_.window_us()); }
  void Score(const SchedulingContext& ctx, Candidates candidates, std::span<double> scores) const override {
    for (size_t i = 0; i < candidates.size(); ++i)
      scores[i] = std::clamp(1.0 - RoomOf(window_, *candidates[i], ctx.now_us).UsedFraction(), 0.0, 1.0);
  }
  std::string Explain(const SchedulingContext& ctx, const Endpoint& e) const override {
    if (!e.capacity.limited()) return "no capacity limit";
    return RoomOf(window_, e, ctx.now_us).Describe(window_.window_s());
  }
  void PreRequest(const SchedulingContext& ctx, const Endpoint& picked) const override {
    if (picked.capacity.limited()) window_.Add(picked.address, ctx.now_us, RequestTokens(ctx));
  }
  void ForgetEndpoint(std::string_view endpoint) const override { window_.Forget(endpoint); }

 private:
  PickWindow window_;
};

// ---- region-spillover-filter

struct SpilloverOptions {
  std::string home;  // may be empty: then only the spill-over order counts
  std::string region_label = std::string(kRegionLabel);
  std::vector<std::string> order;  // regions after home, as configured
  double queue_threshold = 5;
  double kv_threshold = 0.8;
  double capacity_threshold = 0.9;
  double staleness_ms = 2000;
  double window_ms = 1000;
  int64_t staleness_us = 2'000'000;  // from staleness_ms
  int64_t window_us = 1'000'000;     // from window_ms
};

absl::Status ReadSpilloverOrder(const Params& order, SpilloverOptions& o) {
  if (order.kind() != Params::Kind::kList)
    return absl::InvalidArgumentError(absl::StrCat(order.path(), ": expected a list of region names"));
  for (const Params& item : order.items()) {
    EPP_ASSIGN_OR_RETURN(std::string r, item.AsString());
    if (r.empty()) return absl::InvalidArgumentError(absl::StrCat(item.path(), ": empty region name"));
    if (std::find(o.order.begin(), o.order.end(), r) != o.order.end())
      return absl::InvalidArgumentError(absl::StrCat(item.path(), ": region '", r, "' listed twice"));
    o.order.push_back(std::move(r));
  }
  return absl::OkStatus();
}

// homeRegion defaults to the runtime's region (--region) and regionLabel to "region"; an empty
// value means the default too.
const ParamTable<SpilloverOptions>& SpilloverTable() {
  static const auto* t =
      &(*new ParamTable<SpilloverOptions>())
           .String("homeRegion", &SpilloverOptions::home, "the region requests stay in first; default: the runtime's region")
           .String("regionLabel", &SpilloverOptions::region_label, "the endpoint label naming its region")
           .Custom("spilloverOrder", ParamType::kStringList, "regions tried after the home region, in order",
                   ReadSpilloverOrder,
                   [](const SpilloverOptions& o) {
                     Params order = Params::List();
                     for (const std::string& r : o.order) order.Append(Params::String(r));
                     return order;
                   })
           .Number("queueThreshold", &SpilloverOptions::queue_threshold, Range::Closed(0, 1e9),
                   "waiting requests at which an endpoint counts as saturated")
           .Number("kvCacheThreshold", &SpilloverOptions::kv_threshold, Range::Closed(0, 1),
                   "KV-cache use at which an endpoint counts as saturated")
           .Number("capacityThreshold", &SpilloverOptions::capacity_threshold, Range::Closed(0, 1),
                   "share of its capacity limit at which an endpoint counts as saturated")
           .Number("metricsStalenessMs", &SpilloverOptions::staleness_ms, Range::Closed(1, 3'600'000),
                   "metrics older than this count the endpoint as saturated")
           .Number("windowMs", &SpilloverOptions::window_ms, Range::Closed(1, 3'600'000),
                   "milliseconds over which picks are counted against capacity");
  return *t;
}

class RegionSpilloverFilter : public Plugin, public Filter, public RequestObserver, public EndpointState {
 public:
  RegionSpilloverFilter(TypedName tn, SpilloverOptions o) : Plugin(std::move(tn)), o_(std::move(o)), window_(o_.window_us) {}
  const Filter* AsFilter() const override { return this; }
  const RequestObserver* AsRequestObserver() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kLabels, PluginInput::kWaitingQueue, PluginInput::kKvCacheUsage}; }
  Params EffectiveParams() const override {
    // Written from the microseconds in use, as before the table (1.0004 ms runs as 1 ms).
    SpilloverOptions shown = o_;
    shown.staleness_ms = static_cast<double>(o_.staleness_us) / 1000.0;
    shown.window_ms = static_cast<double>(o_.window_us) / 1000.0;
    return SpilloverTable().Effective(shown);
  }

  std::vector<const Endpoint*> Apply(const SchedulingContext& ctx, Candidates candidates) const override {
    return Decide(ctx, candidates).kept;
  }
  std::string WhyRemoved(const SchedulingContext& ctx, const Endpoint& e) const override {
    // Explain calls this with the candidates the filter saw gone; judge e on its own, and name
    // the region that took the request when one did.
    if (std::string why = Unavailable(ctx, e); !why.empty()) return why;
    if (std::string why = Saturated(ctx, e); !why.empty()) return absl::StrCat("saturated: ", why);
    return absl::StrCat("region '", RegionOf(e, o_.region_label), "' comes later in the spill-over order (",
                        absl::StrJoin(OrderFor({}), " > "), ") than a region with unsaturated endpoints");
  }
  void PreRequest(const SchedulingContext& ctx, const Endpoint& picked) const override {
    if (picked.capacity.limited()) window_.Add(picked.address, ctx.now_us, RequestTokens(ctx));
  }
  void ForgetEndpoint(std::string_view endpoint) const override { window_.Forget(endpoint); }

 private:
  struct Decision {
    std::vector<const Endpoint*> kept;
  };

  // Why e cannot take requests at all, or "".
  std::string Unavailable(const SchedulingContext& ctx, const Endpoint& e) const {
    if (e.unreachable) return "unreachable (its metrics endpoint refused the connection)";
    if (ctx.MetricsStale(e, o_.staleness_us)) return absl::StrCat("metrics stale (older than ", Num(o_.staleness_us / 1000.0), " ms)");
    if (std::optional<double> ready = e.metrics.Custom(kReadyPodsAttribute); ready && *ready <= 0) return "0 ready pods";
    return "";
  }
  // Why e is saturated, or "".
  std::string Saturated(const SchedulingContext& ctx, const Endpoint& e) const {
    if (e.metrics.waiting_queue_size && *e.metrics.waiting_queue_size >= o_.queue_threshold)
      return absl::StrCat("queue ", Num(*e.metrics.waiting_queue_size), " >= ", Num(o_.queue_threshold));
    if (e.metrics.kv_cache_usage && *e.metrics.kv_cache_usage >= o_.kv_threshold)
      return absl::StrCat("KV cache ", Num(*e.metrics.kv_cache_usage), " >= ", Num(o_.kv_threshold));
    if (e.capacity.limited()) {
      const Room r = RoomOf(window_, e, ctx.now_us);
      if (r.UsedFraction() >= o_.capacity_threshold)
        return absl::StrCat("capacity ", r.Describe(window_.window_s()), " >= ", Num(o_.capacity_threshold), " of the limit");
    }
    return "";
  }
  // Home, then the configured order, then every other region of `seen` by name, then unlabelled.
  std::vector<std::string> OrderFor(const std::set<std::string>& seen) const {
    std::vector<std::string> out;
    auto add = [&](const std::string& r) {
      if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
    };
    if (!o_.home.empty()) add(o_.home);
    for (const std::string& r : o_.order) add(r);
    for (const std::string& r : seen)
      if (!r.empty()) add(r);
    if (seen.contains("")) add("");
    return out;
  }
  Decision Decide(const SchedulingContext& ctx, Candidates candidates) const {
    std::vector<const Endpoint*> available;
    for (const Endpoint* e : candidates)
      if (Unavailable(ctx, *e).empty()) available.push_back(e);
    if (available.empty()) {
      // No pool reports itself usable: keep the reachable ones (metrics may lag; trying beats a
      // certain 503), else everything.
      Decision d;
      for (const Endpoint* e : candidates)
        if (!e->unreachable) d.kept.push_back(e);
      if (d.kept.empty()) d.kept.assign(candidates.begin(), candidates.end());
      return d;
    }
    std::set<std::string> seen;
    for (const Endpoint* e : available) seen.insert(RegionOf(*e, o_.region_label));
    for (const std::string& region : OrderFor(seen)) {
      Decision d;
      for (const Endpoint* e : available)
        if (RegionOf(*e, o_.region_label) == region && Saturated(ctx, *e).empty()) d.kept.push_back(e);
      if (!d.kept.empty()) return d;
    }
    return Decision{available};  // every region saturated: overflow everywhere usable
  }

  SpilloverOptions o_;
  PickWindow window_;
};

// ---- region-rtt-scorer

struct RttOptions {
  std::string home;
  std::string label = std::string(kRegionLabel);
  std::map<std::string, std::map<std::string, double>> rtt;
  double largest = 0;  // the largest RTT in rtt
  Params rtt_params = Params::Map();  // rttMs as written
  double max_rtt = 0;  // 0: not given (the factory takes the largest RTT, else 100)
};

absl::Status ReadRtt(const Params& m, RttOptions& o) {
  if (!m.is_map()) return absl::InvalidArgumentError(absl::StrCat(m.path(), ": expected a map FROM: {TO: milliseconds}"));
  o.rtt_params = m;
  for (const auto& [from, row] : m.entries()) {
    if (!row.is_map()) return absl::InvalidArgumentError(absl::StrCat(row.path(), ": expected a map TO: milliseconds"));
    for (const auto& [to, v] : row.entries()) {
      EPP_ASSIGN_OR_RETURN(double ms, v.AsDouble());
      if (!(ms >= 0) || std::isinf(ms)) return absl::InvalidArgumentError(absl::StrCat(v.path(), ": must be a finite number >= 0"));
      o.rtt[from][to] = ms;
      o.largest = std::max(o.largest, ms);
    }
  }
  return absl::OkStatus();
}

const ParamTable<RttOptions>& RttTable() {
  static const auto* t =
      &(*new ParamTable<RttOptions>())
           .String("homeRegion", &RttOptions::home, "the region RTTs are measured from; default: the runtime's region")
           .String("regionLabel", &RttOptions::label, "the endpoint label naming its region")
           .Custom("rttMs", ParamType::kMap, "FROM: {TO: milliseconds}; one direction suffices", ReadRtt,
                   [](const RttOptions& o) { return o.rtt_params; })
           .Custom("maxRttMs", ParamType::kNumber, "the RTT that scores 0; default: the largest in rttMs, else 100",
                   [](const Params& v, RttOptions& o) -> absl::Status {
                     EPP_ASSIGN_OR_RETURN(o.max_rtt, v.AsDouble());
                     if (!(o.max_rtt > 0)) return absl::InvalidArgumentError(absl::StrCat(v.path(), ": must be a finite number > 0"));
                     return absl::OkStatus();
                   },
                   [](const RttOptions& o) { return o.max_rtt > 0 ? Params::Number(o.max_rtt) : Params(); });
  return *t;
}

class RegionRttScorer : public Plugin, public Scorer {
 public:
  RegionRttScorer(TypedName tn, std::string home, std::string label, std::map<std::string, std::map<std::string, double>> rtt,
                  double max_rtt, Params rtt_params)
      : Plugin(std::move(tn)), home_(std::move(home)), label_(std::move(label)), rtt_(std::move(rtt)), max_rtt_(max_rtt),
        rtt_params_(std::move(rtt_params)) {}
  const Scorer* AsScorer() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kLabels}; }
  ScorerCategory category() const override { return ScorerCategory::kAffinity; }
  Params EffectiveParams() const override {
    RttOptions o;
    o.home = home_;
    o.label = label_;
    o.rtt_params = rtt_params_;
    o.max_rtt = max_rtt_;
    return RttTable().Effective(o);
  }
  void Score(const SchedulingContext&, Candidates candidates, std::span<double> scores) const override {
    for (size_t i = 0; i < candidates.size(); ++i) {
      const std::optional<double> rtt = RttTo(RegionOf(*candidates[i], label_));
      scores[i] = rtt ? std::clamp(1.0 - *rtt / max_rtt_, 0.0, 1.0) : 0.0;
    }
  }
  std::string Explain(const SchedulingContext&, const Endpoint& e) const override {
    const std::string region = RegionOf(e, label_);
    if (region.empty()) return "no region label";
    const std::optional<double> rtt = RttTo(region);
    if (!rtt) return absl::StrCat("no RTT known from '", home_, "' to '", region, "'");
    return absl::StrCat("RTT ", home_, " -> ", region, " ", Num(*rtt), " ms (max ", Num(max_rtt_), ")");
  }

 private:
  std::optional<double> RttTo(const std::string& region) const {
    if (region.empty() || home_.empty()) return std::nullopt;
    if (auto a = rtt_.find(home_); a != rtt_.end())
      if (auto b = a->second.find(region); b != a->second.end()) return b->second;
    if (auto a = rtt_.find(region); a != rtt_.end())  // the matrix is symmetric where one side is given
      if (auto b = a->second.find(home_); b != a->second.end()) return b->second;
    if (region == home_) return 0.0;
    return std::nullopt;
  }
  std::string home_, label_;
  std::map<std::string, std::map<std::string, double>> rtt_;
  double max_rtt_;
  Params rtt_params_;
};

// ---- zone-preference-scorer

struct ZoneOptions {
  std::string zone;  // default: the runtime's zone
  std::string header = "x-gateway-zone";
  std::string label = std::string(kZoneLabel);
  double other = 0;
};

const ParamTable<ZoneOptions>& ZoneTable() {
  static const auto* t =
      &(*new ParamTable<ZoneOptions>())
           .String("zone", &ZoneOptions::zone, "the gateway's zone when no header names it; default: the runtime's zone")
           .String("zoneHeader", &ZoneOptions::header, "the request header naming the gateway's zone (lower case)")
           .String("zoneLabel", &ZoneOptions::label, "the endpoint label naming its zone (else topology.kubernetes.io/zone)")
           .Number("otherZoneScore", &ZoneOptions::other, Range::Closed(0, 1), "the score of an endpoint in another zone");
  return *t;
}

class ZonePreferenceScorer : public Plugin, public Scorer {
 public:
  ZonePreferenceScorer(TypedName tn, std::string zone, std::string header, std::string label, double other)
      : Plugin(std::move(tn)), zone_(std::move(zone)), header_(std::move(header)), label_(std::move(label)), other_(other) {}
  const Scorer* AsScorer() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kLabels}; }
  ScorerCategory category() const override { return ScorerCategory::kAffinity; }
  Params EffectiveParams() const override { return ZoneTable().Effective(ZoneOptions{zone_, header_, label_, other_}); }
  void Score(const SchedulingContext& ctx, Candidates candidates, std::span<double> scores) const override {
    const std::string gw = GatewayZone(ctx);
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (gw.empty()) {
        scores[i] = 0;
        continue;
      }
      const std::optional<std::string> z = LabelOf(*candidates[i], label_, kKubeZoneLabel);
      scores[i] = z && *z == gw ? 1.0 : (z ? other_ : 0.0);
    }
  }
  std::string Explain(const SchedulingContext& ctx, const Endpoint& e) const override {
    const std::string gw = GatewayZone(ctx);
    if (gw.empty()) return absl::StrCat("gateway zone unknown (no ", header_, " header, no zone configured)");
    const std::optional<std::string> z = LabelOf(e, label_, kKubeZoneLabel);
    if (!z) return "no zone label";
    return absl::StrCat(*z == gw ? "same zone " : "zone ", *z, *z == gw ? "" : absl::StrCat(", gateway in ", gw));
  }

 private:
  std::string GatewayZone(const SchedulingContext& ctx) const {
    if (ctx.request != nullptr && !header_.empty())
      for (const auto& [k, v] : ctx.request->headers)
        if (k == header_ && !v.empty()) return v;
    return zone_;
  }
  std::string zone_, header_, label_;
  double other_;
};

}  // namespace

PluginOr CreateCapacityFilter(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(WindowOptions o, WindowTable().Read(params));
  return std::make_unique<CapacityFilter>(TN(kCapacityFilterType, name), MillisToMicros(o.window_ms));
}

PluginOr CreateCapacityScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(WindowOptions o, WindowTable().Read(params));
  return std::make_unique<CapacityScorer>(TN(kCapacityScorerType, name), MillisToMicros(o.window_ms));
}

PluginOr CreateRegionSpilloverFilter(const std::string& name, const Params& params, const PluginContext& ctx) {
  SpilloverOptions defaults;
  defaults.home = ctx.region;
  EPP_ASSIGN_OR_RETURN(SpilloverOptions o, SpilloverTable().Read(params, defaults));
  if (o.home.empty()) o.home = ctx.region;
  if (o.region_label.empty()) o.region_label = kRegionLabel;
  o.staleness_us = MillisToMicros(o.staleness_ms);
  o.window_us = MillisToMicros(o.window_ms);
  return std::make_unique<RegionSpilloverFilter>(TN(kRegionSpilloverFilterType, name), std::move(o));
}

PluginOr CreateRegionRttScorer(const std::string& name, const Params& params, const PluginContext& ctx) {
  RttOptions defaults;
  defaults.home = ctx.region;
  EPP_ASSIGN_OR_RETURN(RttOptions o, RttTable().Read(params, defaults));
  if (o.home.empty()) o.home = ctx.region;
  if (o.label.empty()) o.label = kRegionLabel;
  if (o.home.empty() && !o.rtt.empty() && ctx.warnings)
    ctx.warnings->push_back(absl::StrCat("plugin '", name, "': no homeRegion and no --region; every candidate scores 0"));
  if (o.max_rtt <= 0) o.max_rtt = o.largest > 0 ? o.largest : 100;
  return std::make_unique<RegionRttScorer>(TN(kRegionRttScorerType, name), std::move(o.home), std::move(o.label), std::move(o.rtt),
                                           o.max_rtt, std::move(o.rtt_params));
}

PluginOr CreateZonePreferenceScorer(const std::string& name, const Params& params, const PluginContext& ctx) {
  ZoneOptions defaults;
  defaults.zone = ctx.zone;
  EPP_ASSIGN_OR_RETURN(ZoneOptions o, ZoneTable().Read(params, defaults));
  if (o.zone.empty()) o.zone = ctx.zone;
  std::transform(o.header.begin(), o.header.end(), o.header.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (o.label.empty()) o.label = kZoneLabel;
  return std::make_unique<ZonePreferenceScorer>(TN(kZonePreferenceScorerType, name), std::move(o.zone), std::move(o.header),
                                                std::move(o.label), o.other);
}

PluginSchema CapacityPluginSchema() { return WindowTable().Schema(); }
PluginSchema RegionSpilloverFilterSchema() { return SpilloverTable().Schema(); }
PluginSchema RegionRttScorerSchema() { return RttTable().Schema(); }
PluginSchema ZonePreferenceScorerSchema() { return ZoneTable().Schema(); }

}  // namespace epp::plugins
