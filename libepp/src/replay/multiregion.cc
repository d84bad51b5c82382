// The multi-region replay (epp/tools/replay.h, "Multi-region replay"): one trace over several regions of
// SimServers, routed three ways (a global EPP, region-level EPPs over pools then the pools' own
// EPPs, local EPPs with blind overflow), in virtual time.
//
// Event order at a microsecond: scrapes due at or before an arrival run first. A scrape advances
// every server, collects completions (releasing the picking schedulers' load) and records one
// snapshot per server; a view from region o of a server in region x reads the latest snapshot
// taken at least RTT(o, x) earlier, stamped as received then (its age counts from receipt, as a
// deployed EPP stamps a scrape).
#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/strings.h"
#include "epp/metrics.h"
#include "epp/prefix_cache.h"
#include "epp/registry.h"
#include "epp/tools/replay.h"
#include "epp/scheduler.h"
#include "replay/render.h"

namespace epp {
namespace {

using internal::Num;
using replay_internal::Summarize;

bool GoodRegionName(std::string_view n) {
  if (n.empty() || n.size() > 40 || n.front() == '-' || n.back() == '-') return false;
  for (char c : n)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  return true;
}

struct Snap {
  int64_t t_us = 0;
  int waiting = 0, running = 0;
  double kv = 0;
};

struct Pending {
  int64_t arrival_us = 0;
  size_t origin = 0;
  size_t server = 0;
  int64_t net_us = 0;
  int64_t blocks = 0;
  const Scheduler* picker = nullptr;  // the EPP that chose the server
  uint64_t pick_id = 0;
  int64_t load_tokens = 0;
  const Scheduler* region_picker = nullptr;  // hierarchical: the region-level EPP
  std::string pool;
  int64_t region_load_tokens = 0;
};

class Engine {
 public:
  Engine(const std::vector<ReplayRequest>& trace, const ReplayPolicy& policy, const MultiRegionOptions& o,
         const std::vector<size_t>& origin)
      : trace_(trace), policy_(policy), o_(o), origin_(origin) {}

  absl::StatusOr<MultiRegionModeReport> Run(const std::string& mode) {
    MultiRegionModeReport rep;
    rep.mode = mode;
    const size_t R = o_.regions.size();
    const int64_t t0 = trace_.empty() ? 0 : trace_.front().arrival_us;
    ManualClock clock(t0);
    SeededRng rng(o_.seed);
    PluginContext ctx{&clock, &rng};
    const PluginRegistry registry = BuiltinRegistry();
    // Servers, region by region.
    servers_.clear();
    region_of_.clear();
    addresses_.clear();
    history_.clear();
    std::vector<std::vector<size_t>> members(R);
    absl::flat_hash_map<std::string, size_t> server_of;
    for (size_t r = 0; r < R; ++r) {
      for (int i = 0; i < o_.regions[r].servers; ++i) {
        SimParams p = o_.server;
        p.seed = o_.seed + servers_.size();
        if (p.models.empty()) p.models = {"model"};
        for (const ReplayRequest& q : trace_)
          if (std::find(p.models.begin(), p.models.end(), q.model) == p.models.end()) p.models.push_back(q.model);
        EPP_ASSIGN_OR_RETURN(auto s, SimServer::Create(p));
        members[r].push_back(servers_.size());
        addresses_.push_back(absl::StrCat("10.", r, ".", i / 250, ".", i % 250 + 1, ":8000"));
        server_of[addresses_.back()] = servers_.size();
        region_of_.push_back(r);
        servers_.push_back(std::move(s));
      }
    }
    history_.assign(servers_.size(), {});
    const int sim_block = o_.server.block_size;
    // Schedulers.
    std::vector<std::unique_ptr<Scheduler>> local(R), region_level(R);
    for (size_t r = 0; r < R; ++r) {
      PluginContext c = ctx;
      c.region = o_.regions[r].name;
      EPP_ASSIGN_OR_RETURN(local[r], BuildScheduler(policy_.config, registry, c));
      if (mode == "hierarchical") {
        EPP_ASSIGN_OR_RETURN(EppConfig cfg, ParseConfig(RegionLevelConfig(r), "region-level config"));
        EPP_ASSIGN_OR_RETURN(region_level[r], BuildScheduler(cfg, registry, c));
      }
    }
    std::unique_ptr<Scheduler> global;
    size_t g = 0;
    for (size_t r = 0; r < R; ++r)
      if (o_.regions[r].name == o_.global_region) g = r;
    if (mode == "global") {
      PluginContext c = ctx;
      c.region = o_.regions[g].name;
      EPP_ASSIGN_OR_RETURN(global, BuildScheduler(policy_.config, registry, c));
    }
    auto make_endpoints = [&](const std::vector<size_t>& idx) {
      std::vector<Endpoint> eps(idx.size());
      for (size_t k = 0; k < idx.size(); ++k) {
        eps[k].address = addresses_[idx[k]];
        eps[k].engine = o_.server.engine;
        eps[k].labels["region"] = o_.regions[region_of_[idx[k]]].name;
        eps[k].metrics.cache_block_size = o_.server.block_size;
        eps[k].metrics.cache_num_blocks = o_.server.kv_blocks;
      }
      return eps;
    };
    std::vector<size_t> all(servers_.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    std::vector<std::vector<Endpoint>> local_eps(R);
    for (size_t r = 0; r < R; ++r) local_eps[r] = make_endpoints(members[r]);
    std::vector<Endpoint> global_eps = make_endpoints(all);
    std::vector<Endpoint> pools(R);
    for (size_t x = 0; x < R; ++x) {
      pools[x].address = absl::StrCat("gw-", o_.regions[x].name, ":443");
      pools[x].engine = std::string(kPoolEngine);
      pools[x].labels["region"] = o_.regions[x].name;
      if (o_.regions[x].capacity_rps > 0) pools[x].capacity.requests_per_second = o_.regions[x].capacity_rps;
    }

    absl::flat_hash_map<uint64_t, Pending> pending;
    std::vector<double> ttft, e2e;
    std::vector<std::vector<double>> ttft_by_origin(R);
    std::vector<int64_t> per_server(servers_.size(), 0);
    rep.arrivals_per_region.assign(R, 0);
    rep.served_per_region.assign(R, 0);
    int64_t hit_blocks = 0, all_blocks = 0, cross = 0;
    std::vector<SimEvent> events;
    auto collect = [&](size_t s) {
      for (const SimEvent& ev : events) {
        if (ev.kind == SimEvent::Kind::kFirstToken) {
          // The picking EPP's response path sees the first token (at the server; the network
          // time back is the same for every pick from that EPP's region).
          if (auto it = pending.find(ev.id); it != pending.end())
            it->second.picker->ObserveFirstToken(it->second.pick_id, addresses_[s], ev.time_us);
          continue;
        }
        auto it = pending.find(ev.id);
        if (it == pending.end()) continue;
        const Pending pd = it->second;
        pending.erase(it);
        std::optional<SimRequestResult> res = servers_[s]->TakeResult(ev.id);
        pd.picker->Release(addresses_[pd.server], pd.load_tokens);
        if (pd.region_picker) pd.region_picker->Release(pd.pool, pd.region_load_tokens);
        if (ev.kind == SimEvent::Kind::kRejected || !res || res->rejected) {
          rep.failed++;
          continue;
        }
        rep.completed++;
        const double t = static_cast<double>(res->first_token_us - pd.arrival_us + pd.net_us) / 1e6;
        ttft.push_back(t);
        ttft_by_origin[pd.origin].push_back(t);
        e2e.push_back(static_cast<double>(res->finish_us - pd.arrival_us + pd.net_us) / 1e6);
        hit_blocks += res->cached_tokens / sim_block;
        all_blocks += pd.blocks;
      }
      events.clear();
    };
    const int64_t max_delay = MaxRttMicros();
    auto scrape = [&](int64_t t) {
      for (size_t s = 0; s < servers_.size(); ++s) {
        servers_[s]->AdvanceTo(t, &events);
        collect(s);
        const SimSnapshot snap = servers_[s]->Snapshot();
        std::deque<Snap>& h = history_[s];
        h.push_back(Snap{t, snap.waiting, snap.running, snap.kv_usage});
        while (h.size() > 2 && h[1].t_us <= t - max_delay - o_.scrape_interval_us) h.pop_front();
      }
    };
    // The view from region `from` at `now` of the servers `idx` into `eps`.
    auto view = [&](size_t from, const std::vector<size_t>& idx, std::vector<Endpoint>& eps, int64_t now) {
      for (size_t k = 0; k < idx.size(); ++k) {
        const Snap* sn = Seen(idx[k], from, now);
        Endpoint& e = eps[k];
        e.metrics.waiting_queue_size = sn ? sn->waiting : 0;
        e.metrics.running_requests = sn ? sn->running : 0;
        e.metrics.kv_cache_usage = sn ? sn->kv : 0.0;
        e.metrics_time_us = sn ? std::min(now, sn->t_us + Rtt(from, region_of_[idx[k]])) : t0;
      }
    };
    auto pool_view = [&](size_t from, int64_t now) {
      for (size_t x = 0; x < R; ++x) {
        double q = 0, run = 0, kv = 0;
        int64_t seen_at = t0;
        for (size_t s : members[x]) {
          if (const Snap* sn = Seen(s, from, now)) {
            q += sn->waiting, run += sn->running, kv += sn->kv;
            seen_at = std::max(seen_at, std::min(now, sn->t_us + Rtt(from, x)));
          }
        }
        const double n = static_cast<double>(members[x].size());
        pools[x].metrics.waiting_queue_size = q / n;
        pools[x].metrics.running_requests = run / n;
        pools[x].metrics.kv_cache_usage = kv / n;
        pools[x].metrics.custom = {{std::string(kReadyPodsAttribute), n}};
        pools[x].metrics_time_us = seen_at;
      }
    };
    auto saturated = [&](size_t r, int64_t now) {
      for (size_t s : members[r]) {
        const Snap* sn = Seen(s, r, now);
        if (!sn || (sn->waiting < o_.saturation_queue && sn->kv < o_.saturation_kv)) return false;
      }
      return true;
    };

    replay_internal::PromptRenderer renderer;
    InferenceRequest req;
    req.path = "/v1/completions";
    int64_t next_scrape = t0;
    uint64_t next_id = 1;
    for (size_t i = 0; i < trace_.size(); ++i) {
      const ReplayRequest& r = trace_[i];
      while (next_scrape <= r.arrival_us) {
        scrape(next_scrape);
        next_scrape += o_.scrape_interval_us;
      }
      clock.Set(r.arrival_us);
      const size_t from = origin_[i];
      rep.arrivals_per_region[from]++;
      req.model = r.model;
      req.prompt.assign(renderer.Render(r));
      req.prompt_tokens = r.prompt_tokens;
      req.priority = r.priority;
      Pending pd;
      pd.arrival_us = r.arrival_us;
      pd.origin = from;
      PickResult pr;
      size_t target_region = from;
      if (mode == "global") {
        view(g, all, global_eps, r.arrival_us);
        pr = global->Pick(req, global_eps);
        pd.picker = global.get();
        pd.net_us = Rtt(from, g);
      } else {
        if (mode == "hierarchical") {
          pool_view(from, r.arrival_us);
          PickResult top = region_level[from]->Pick(req, pools);
          if (top.status != 200) {
            rep.shed++;
            continue;
          }
          for (size_t x = 0; x < R; ++x)
            if (pools[x].address == top.endpoints.front()) target_region = x;
          pd.region_picker = region_level[from].get();
          pd.pool = top.endpoints.front();
          pd.region_load_tokens = top.load_tokens;
        } else if (saturated(from, r.arrival_us)) {
          target_region = Nearest(from);
        }
        view(target_region, members[target_region], local_eps[target_region], r.arrival_us);
        pr = local[target_region]->Pick(req, local_eps[target_region]);
        pd.picker = local[target_region].get();
        if (pr.status != 200 && pd.region_picker) pd.region_picker->Release(pd.pool, pd.region_load_tokens);
      }
      if (pr.status != 200) {
        rep.shed++;
        continue;
      }
      const size_t s = server_of.at(pr.endpoints.front());
      pd.server = s;
      pd.load_tokens = pr.load_tokens;
      pd.pick_id = pr.pick_id;
      if (region_of_[s] != from) {
        pd.net_us += Rtt(from, region_of_[s]);
        ++cross;
      }
      rep.served_per_region[region_of_[s]]++;
      per_server[s]++;
      SimRequest sr;
      sr.id = next_id++;
      sr.block_hashes = ChainedBlockHashes(req.prompt, static_cast<size_t>(sim_block) * kCharsPerToken, PrefixSeed(r.model));
      pd.blocks = static_cast<int64_t>(sr.block_hashes.size());
      sr.prompt_tokens = std::max<int64_t>(1, r.prompt_tokens);
      sr.output_tokens = std::max<int64_t>(1, r.output_tokens);
      pending.emplace(sr.id, pd);
      absl::Status st = servers_[s]->Submit(sr, r.arrival_us, &events);
      if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat(mode, ": ", st.message()));
      collect(s);
    }
    for (size_t s = 0; s < servers_.size(); ++s) {
      for (int guard = 0; guard < 100000000; ++guard) {
        const int64_t t = servers_[s]->NextEventTime();
        if (t == std::numeric_limits<int64_t>::max()) break;
        servers_[s]->AdvanceTo(t, &events);
        collect(s);
      }
    }
    rep.failed += static_cast<int64_t>(pending.size());
    rep.ttft_s = Summarize(ttft);
    rep.e2e_s = Summarize(e2e);
    for (size_t r = 0; r < R; ++r) rep.ttft_p90_per_origin_s.push_back(Summarize(ttft_by_origin[r]).p90);
    rep.block_hit_rate = all_blocks ? static_cast<double>(hit_blocks) / static_cast<double>(all_blocks) : 0;
    const int64_t served = rep.completed + rep.failed;
    rep.cross_region_share = served ? static_cast<double>(cross) / static_cast<double>(served) : 0;
    int64_t mx = 0, sum = 0;
    for (int64_t c : per_server) mx = std::max(mx, c), sum += c;
    rep.load_max_over_mean = sum ? static_cast<double>(mx) * static_cast<double>(per_server.size()) / static_cast<double>(sum) : 0;
    return rep;
  }

 private:
  int64_t Rtt(size_t a, size_t b) const {
    if (a == b) return 0;
    const std::string &x = o_.regions[a].name, &y = o_.regions[b].name;
    auto it = o_.rtt_ms.find({x, y});
    if (it == o_.rtt_ms.end()) it = o_.rtt_ms.find({y, x});
    return it == o_.rtt_ms.end() ? 0 : std::llround(it->second * 1000.0);
  }
  int64_t MaxRttMicros() const {
    int64_t m = 0;
    for (size_t a = 0; a < o_.regions.size(); ++a)
      for (size_t b = 0; b < o_.regions.size(); ++b) m = std::max(m, Rtt(a, b));
    return m;
  }
  size_t Nearest(size_t from) const {
    size_t best = from;
    int64_t best_rtt = std::numeric_limits<int64_t>::max();
    for (size_t x = 0; x < o_.regions.size(); ++x)
      if (x != from && Rtt(from, x) < best_rtt) best = x, best_rtt = Rtt(from, x);
    return best;
  }
  // The latest snapshot of server s that region `from` has received by `now`; nullptr if none.
  const Snap* Seen(size_t s, size_t from, int64_t now) const {
    const int64_t cutoff = now - Rtt(from, region_of_[s]);
    const std::deque<Snap>& h = history_[s];
    for (auto it = h.rbegin(); it != h.rend(); ++it)
      if (it->t_us <= cutoff) return &*it;
    return nullptr;
  }
  // The region-level EPP of region r: capacity, home first then the rest by RTT, RTT preference,
  // pool queue and KV.
  std::string RegionLevelConfig(size_t r) const {
    std::vector<size_t> order;
    for (size_t x = 0; x < o_.regions.size(); ++x)
      if (x != r) order.push_back(x);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return Rtt(r, a) < Rtt(r, b); });
    std::string spill, rtt;
    for (size_t x : order) spill += absl::StrCat(spill.empty() ? "" : ", ", o_.regions[x].name);
    for (size_t x : order) rtt += absl::StrCat(rtt.empty() ? "" : ", ", o_.regions[x].name, ": ", Num(static_cast<double>(Rtt(r, x)) / 1000.0));
    return absl::StrCat(
        "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
        "- type: capacity-filter\n"
        "- type: region-spillover-filter\n  parameters: {spilloverOrder: [", spill, "], queueThreshold: ", Num(o_.saturation_queue),
        ", kvCacheThreshold: ", Num(o_.saturation_kv), ", metricsStalenessMs: 3600000}\n"
        "- type: region-rtt-scorer\n  parameters: {rttMs: {", o_.regions[r].name, ": {", rtt, "}}}\n"
        "- type: queue-scorer\n- type: kv-cache-utilization-scorer\n"
        "schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: capacity-filter\n"
        "  - pluginRef: region-spillover-filter\n  - {pluginRef: region-rtt-scorer, weight: 1}\n"
        "  - {pluginRef: queue-scorer, weight: 2}\n  - {pluginRef: kv-cache-utilization-scorer, weight: 1}\n");
  }

  const std::vector<ReplayRequest>& trace_;
  const ReplayPolicy& policy_;
  const MultiRegionOptions& o_;
  const std::vector<size_t>& origin_;
  std::vector<std::unique_ptr<SimServer>> servers_;
  std::vector<size_t> region_of_;
  std::vector<std::string> addresses_;
  std::vector<std::deque<Snap>> history_;
};

}  // namespace

absl::StatusOr<MultiRegionReport> RunMultiRegionReplay(const std::vector<ReplayRequest>& trace, const ReplayPolicy& policy,
                                                       const MultiRegionOptions& options) {
  MultiRegionOptions o = options;
  if (o.regions.size() < 2) return absl::InvalidArgumentError("a multi-region replay needs at least two regions");
  if (o.regions.size() > 64) return absl::InvalidArgumentError("at most 64 regions");
  std::set<std::string> names;
  double shares = 0;
  for (const ReplayRegion& r : o.regions) {
    if (!GoodRegionName(r.name))
      return absl::InvalidArgumentError(absl::StrCat("region '", r.name, "': names are lower-case letters, digits and '-'"));
    if (!names.insert(r.name).second) return absl::InvalidArgumentError(absl::StrCat("region '", r.name, "' given twice"));
    if (r.servers < 1 || r.servers > 10000) return absl::InvalidArgumentError(absl::StrCat("region '", r.name, "': servers must be in 1..10000"));
    if (!(r.arrival_share >= 0) || std::isinf(r.arrival_share))
      return absl::InvalidArgumentError(absl::StrCat("region '", r.name, "': arrival share must be a finite number >= 0"));
    if (!(r.capacity_rps >= 0) || std::isinf(r.capacity_rps))
      return absl::InvalidArgumentError(absl::StrCat("region '", r.name, "': capacity must be a finite number >= 0"));
    shares += r.arrival_share;
  }
  if (!(shares > 0)) return absl::InvalidArgumentError("the regions' arrival shares add up to 0");
  for (const auto& [pair, ms] : o.rtt_ms) {
    if (!names.contains(pair.first) || !names.contains(pair.second))
      return absl::InvalidArgumentError(absl::StrCat("RTT ", pair.first, "/", pair.second, ": unknown region"));
    if (!(ms >= 0) || std::isinf(ms)) return absl::InvalidArgumentError(absl::StrCat("RTT ", pair.first, "/", pair.second, ": must be >= 0"));
  }
  for (size_t a = 0; a < o.regions.size(); ++a)
    for (size_t b = a + 1; b < o.regions.size(); ++b) {
      const std::string &x = o.regions[a].name, &y = o.regions[b].name;
      if (!o.rtt_ms.count({x, y}) && !o.rtt_ms.count({y, x}))
        return absl::InvalidArgumentError(absl::StrCat("no RTT between ", x, " and ", y, " (give ", x, "/", y, "=MS)"));
    }
  if (o.global_region.empty()) o.global_region = o.regions.front().name;
  if (!names.contains(o.global_region)) return absl::InvalidArgumentError(absl::StrCat("global region '", o.global_region, "' is not a region"));
  if (o.scrape_interval_us <= 0) return absl::InvalidArgumentError("the metrics refresh interval must be > 0");
  if (o.server.models.empty()) o.server.models = {"model"};
  EPP_RETURN_IF_ERROR(o.server.Validate());
  for (size_t i = 1; i < trace.size(); ++i)
    if (trace[i].arrival_us < trace[i - 1].arrival_us) return absl::InvalidArgumentError("the trace is not sorted by arrival time");
  // Arrival regions: the trace's, else by share; the same for every mode.
  std::vector<size_t> origin(trace.size());
  SeededRng rng(o.seed ^ 0x6d756c7469726567ULL);
  int64_t from_trace = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    if (!trace[i].region.empty()) {
      size_t r = 0;
      while (r < o.regions.size() && o.regions[r].name != trace[i].region) ++r;
      if (r == o.regions.size())
        return absl::InvalidArgumentError(absl::StrCat("trace request ", i + 1, " (by arrival) arrives in region '", trace[i].region,
                                                       "', which is not one of the replay's regions"));
      origin[i] = r;
      ++from_trace;
      continue;
    }
    double u = rng.Uniform() * shares;
    size_t r = 0;
    while (r + 1 < o.regions.size() && u >= o.regions[r].arrival_share) u -= o.regions[r].arrival_share, ++r;
    origin[i] = r;
  }
  MultiRegionReport report;
  report.policy = policy.name;
  report.regions = o.regions;
  report.arrivals_from_trace = from_trace;
  for (const char* mode : {"global", "hierarchical", "local"}) {
    const auto wall0 = std::chrono::steady_clock::now();
    Engine engine(trace, policy, o, origin);
    EPP_ASSIGN_OR_RETURN(MultiRegionModeReport rep, engine.Run(mode));
    rep.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    report.modes.push_back(std::move(rep));
  }
  return report;
}

absl::StatusOr<std::vector<ReplayRegion>> ParseReplayRegions(std::string_view text) {
  std::vector<ReplayRegion> out;
  for (absl::string_view item : absl::StrSplit(absl::string_view(text.data(), text.size()), ',', absl::SkipWhitespace())) {
    const std::string it(internal::TrimSpace(std::string_view(item.data(), item.size())));
    std::vector<std::string> f = absl::StrSplit(it, ':');
    ReplayRegion r;
    r.name = f[0];
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat("--regions '", it, "': ", why, " (NAME:SERVERS[:SHARE[:CAPACITY_RPS]])"));
    };
    if (f.size() < 2 || f.size() > 4) return bad("expected 2 to 4 fields");
    if (!GoodRegionName(r.name)) return bad("names are lower-case letters, digits and '-'");
    if (!absl::SimpleAtoi(f[1], &r.servers) || r.servers < 1) return bad("SERVERS must be a whole number >= 1");
    if (f.size() > 2 && (!absl::SimpleAtod(f[2], &r.arrival_share) || !(r.arrival_share >= 0) || std::isinf(r.arrival_share)))
      return bad("SHARE must be a number >= 0");
    if (f.size() > 3 && (!absl::SimpleAtod(f[3], &r.capacity_rps) || !(r.capacity_rps >= 0) || std::isinf(r.capacity_rps)))
      return bad("CAPACITY_RPS must be a number >= 0");
    out.push_back(std::move(r));
  }
  if (out.empty()) return absl::InvalidArgumentError("--regions: no region given");
  return out;
}

absl::StatusOr<std::map<std::pair<std::string, std::string>, double>> ParseRttMatrix(std::string_view text) {
  std::map<std::pair<std::string, std::string>, double> out;
  for (absl::string_view item : absl::StrSplit(absl::string_view(text.data(), text.size()), ',', absl::SkipWhitespace())) {
    const std::string it(internal::TrimSpace(std::string_view(item.data(), item.size())));
    auto bad = [&](const std::string& why) { return absl::InvalidArgumentError(absl::StrCat("--rtt '", it, "': ", why, " (A/B=MS)")); };
    const size_t eq = it.find('='), slash = it.find('/');
    if (eq == std::string::npos || slash == std::string::npos || slash > eq) return bad("expected A/B=MS");
    const std::string a = it.substr(0, slash), b = it.substr(slash + 1, eq - slash - 1);
    double ms = 0;
    if (!GoodRegionName(a) || !GoodRegionName(b)) return bad("region names are lower-case letters, digits and '-'");
    if (!absl::SimpleAtod(it.substr(eq + 1), &ms) || !(ms >= 0) || std::isinf(ms)) return bad("MS must be a number >= 0");
    if (out.count({a, b}) || out.count({b, a})) return bad("given twice");
    out[{a, b}] = ms;
  }
  return out;
}

std::string MultiRegionReportToJson(const MultiRegionReport& report, int indent) {
  using nlohmann::json;
  auto pct = [](const Percentiles& p) { return json{{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"mean", p.mean}}; };
  json regions = json::array();
  for (const ReplayRegion& r : report.regions)
    regions.push_back({{"name", r.name}, {"servers", r.servers}, {"arrival_share", r.arrival_share}, {"capacity_rps", r.capacity_rps}});
  json modes = json::array();
  for (const MultiRegionModeReport& m : report.modes)
    modes.push_back({{"mode", m.mode},
                     {"completed", m.completed},
                     {"shed", m.shed},
                     {"failed", m.failed},
                     {"ttft_s", pct(m.ttft_s)},
                     {"e2e_s", pct(m.e2e_s)},
                     {"block_hit_rate", m.block_hit_rate},
                     {"cross_region_share", m.cross_region_share},
                     {"arrivals_per_region", m.arrivals_per_region},
                     {"served_per_region", m.served_per_region},
                     {"ttft_p90_per_origin_s", m.ttft_p90_per_origin_s},
                     {"load_max_over_mean", m.load_max_over_mean},
                     {"wall_s", m.wall_s}});
  return json{{"policy", report.policy}, {"regions", regions}, {"arrivals_from_trace", report.arrivals_from_trace}, {"modes", modes}}
      .dump(indent);
}

std::string MultiRegionReportToText(const MultiRegionReport& r) {
  std::string out = absl::StrCat("local policy ", r.policy, "; regions:");
  for (const ReplayRegion& g : r.regions)
    absl::StrAppend(&out, " ", g.name, " (", g.servers, " servers, share ", Num(g.arrival_share),
                    g.capacity_rps > 0 ? absl::StrCat(", capacity ", Num(g.capacity_rps), " req/s") : "", ")");
  if (r.arrivals_from_trace > 0) absl::StrAppend(&out, "; ", r.arrivals_from_trace, " arrival regions from the trace");
  absl::StrAppend(&out, "\n\n");
  char line[512];
  std::snprintf(line, sizeof line, "%-13s %9s %6s %9s %9s %9s %8s %8s %8s  %s\n", "mode", "completed", "shed", "TTFT p50", "TTFT p90",
                "TTFT p99", "hit rate", "cross", "load max", "served per region");
  out += line;
  for (const MultiRegionModeReport& m : r.modes) {
    std::string per;
    for (size_t i = 0; i < m.served_per_region.size(); ++i)
      absl::StrAppend(&per, i ? " / " : "", m.served_per_region[i]);
    std::snprintf(line, sizeof line, "%-13s %9lld %6lld %8.3fs %8.3fs %8.3fs %8.3f %7.1f%% %8.2f  %s\n", m.mode.c_str(),
                  static_cast<long long>(m.completed), static_cast<long long>(m.shed), m.ttft_s.p50, m.ttft_s.p90, m.ttft_s.p99,
                  m.block_hit_rate, 100 * m.cross_region_share, m.load_max_over_mean, per.c_str());
    out += line;
  }
  out += "\nTTFT p90 by arrival region:";
  for (size_t i = 0; i < r.regions.size(); ++i) {
    absl::StrAppend(&out, "\n  ", r.regions[i].name, ":");
    for (const MultiRegionModeReport& m : r.modes)
      absl::StrAppend(&out, " ", m.mode, " ", i < m.ttft_p90_per_origin_s.size() ? Num(m.ttft_p90_per_origin_s[i]) : "-", " s");
  }
  return out + "\n";
}

}  // namespace epp
