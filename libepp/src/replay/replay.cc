// The replay engine: a discrete-event loop in virtual time over N SimServers and one Scheduler
// per policy (behaviour in epp/tools/replay.h).
//
// Event order at a given microsecond: scrapes due at or before an arrival run first (so a
// request sees metrics at most one interval old, as a deployed EPP does), then the arrival is
// scheduled and submitted. Completions are collected whenever a server is advanced (at scrapes
// and submissions), and release the scheduler's in-flight load then: a completion is noticed at
// most one scrape interval late, a documented simplification of "at response end".
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <queue>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/strings.h"
#include "epp/prefix_cache.h"
#include "epp/registry.h"
#include "epp/tools/replay.h"
#include "epp/shared_state.h"
#include "epp/kv/index.h"
#include "epp/kv/subscriber.h"
#include "epp/scheduler.h"
#include "flowcontrol/build.h"
#include "flowcontrol/controller.h"
#include "replay/render.h"

namespace epp {
namespace {

using internal::Num;

}  // namespace

// Nearest-rank-interpolated p50/p90/p99 and the mean; sorts in place. Zeros when empty.
Percentiles replay_internal::Summarize(std::vector<double>& v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos)), hi = static_cast<size_t>(std::ceil(pos));
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  p.p50 = at(0.5);
  p.p90 = at(0.9);
  p.p99 = at(0.99);
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / static_cast<double>(v.size());
  return p;
}

namespace {

using replay_internal::Summarize;

// An LRU of block hashes (the pooled-cache bound): a doubly linked list threaded through a
// node array (no allocation per block once full) and a map from hash to node.
class BlockLru {
 public:
  explicit BlockLru(int64_t capacity) : capacity_(static_cast<size_t>(std::max<int64_t>(1, capacity))) {}
  bool Contains(uint64_t h) const { return map_.contains(h); }
  void Touch(uint64_t h) {
    auto [it, inserted] = map_.try_emplace(h, 0);
    if (!inserted) {
      MoveToBack(it->second);
      return;
    }
    uint32_t n;
    if (nodes_.size() < capacity_) {
      n = static_cast<uint32_t>(nodes_.size());
      nodes_.push_back({});
    } else {  // full: reuse the least recently used node
      n = head_;
      map_.erase(nodes_[n].hash);
      Unlink(n);
      it = map_.find(h);
    }
    nodes_[n].hash = h;
    it->second = n;
    PushBack(n);
  }

 private:
  static constexpr uint32_t kNil = UINT32_MAX;
  struct Node {
    uint64_t hash = 0;
    uint32_t prev = kNil, next = kNil;
  };
  void Unlink(uint32_t n) {
    Node& x = nodes_[n];
    (x.prev == kNil ? head_ : nodes_[x.prev].next) = x.next;
    (x.next == kNil ? tail_ : nodes_[x.next].prev) = x.prev;
    x.prev = x.next = kNil;
  }
  void PushBack(uint32_t n) {
    nodes_[n].prev = tail_;
    nodes_[n].next = kNil;
    (tail_ == kNil ? head_ : nodes_[tail_].next) = n;
    tail_ = n;
  }
  void MoveToBack(uint32_t n) {
    if (n == tail_) return;
    Unlink(n);
    PushBack(n);
  }

  size_t capacity_;
  std::vector<Node> nodes_;
  uint32_t head_ = kNil, tail_ = kNil;  // head: least recently used
  absl::flat_hash_map<uint64_t, uint32_t> map_;
};

struct Pending {
  int64_t arrival_us = 0;
  size_t server = 0;
  int64_t predicted_tokens = 0;
  int64_t matchable_tokens = 0;  // what the EPP hashed (its block cap): the window it can predict
  int64_t blocks = 0;
  int64_t load_tokens = 0;
  size_t bucket = 0;
  bool predicts = false;  // the policy has a prefix producer
  // P/D: a request the policy disaggregated runs as a prefill stage (one output token on the
  // prefill server), then as its decode stage on `decode_server`.
  bool pd = false;
  bool prefill_stage = false;
  size_t decode_server = 0;
  SimRequest decode_req;        // prefill stage: what to submit once the KV has arrived
  int64_t prefill_queue_us = 0;  // decode stage: the prefill's queueing
  int64_t transfer_us = 0;       // decode stage: the KV transfer
  size_t replica = 0;            // the EPP replica that picked it (ReplayOptions::epp_replicas)
  uint64_t pick_id = 0;          // PickResult::pick_id: its first token is reported to the replica
  size_t band = 0, tenant = 0;   // its groups (PolicyRun::bands, tenants)
  size_t trace_index = 0;        // its ReplayRequest in the trace
};

// What a policy's run measures for one priority band or tenant (ReplayGroupReport).
struct GroupAcc {
  std::string name;
  int64_t requests = 0, completed = 0, dropped = 0, served = 0;
  std::vector<double> ttft, wait;
};

// KV events on their way from a server to the EPP replicas (ReplayOptions::kv_event_delay_us).
struct KvDelivery {
  int64_t t_us;
  size_t server;
  std::vector<KvEvent> events;
  bool operator>(const KvDelivery& o) const { return t_us > o.t_us; }
};

// A decode stage waiting for its KV transfer to end.
struct Deferred {
  int64_t t_us;
  size_t server;
  SimRequest request;
  bool operator>(const Deferred& o) const { return t_us != o.t_us ? t_us > o.t_us : request.id > o.request.id; }
};

}  // namespace

namespace {

// The cost model's first step for a request alone on a server (sim.cc's PlanStep with one
// running request): in microseconds, as the simulator rounds it.
int64_t LoneFirstStepMicros(const SimParams& p, int64_t prefill_tokens) {
  return std::llround((p.decode_step_ms + p.decode_ms_per_seq) * 1000.0) +
         std::llround(static_cast<double>(prefill_tokens) * 1e6 / p.prefill_tokens_per_s);
}

// Idle and hot servers, and starvation windows (ReplayPolicyReport::flags).
void AddLoadFlags(ReplayPolicyReport& rep, const std::vector<int64_t>& bucket_server, size_t buckets, double span_s) {
  const size_t n = rep.requests_per_server.size();
  int64_t total = 0;
  for (int64_t c : rep.requests_per_server) total += c;
  if (n < 2 || total < static_cast<int64_t>(n)) return;
  const double mean = static_cast<double>(total) / static_cast<double>(n);
  std::vector<std::string> idle, hot;
  for (size_t i = 0; i < n; ++i) {
    if (rep.requests_per_server[i] == 0) idle.push_back(std::to_string(i));
    if (static_cast<double>(rep.requests_per_server[i]) > 2 * mean)
      hot.push_back(absl::StrCat(i, " (", rep.requests_per_server[i], ")"));
  }
  if (!idle.empty())
    rep.flags.push_back({"idle-servers", absl::StrCat(idle.size(), " of ", n, " servers received no request: ", absl::StrJoin(idle, ", "))});
  if (!hot.empty())
    rep.flags.push_back({"hot-servers", absl::StrCat("servers with more than twice the mean of ", Num(mean),
                                                     " requests: ", absl::StrJoin(hot, ", "))});
  // A server that got nothing for 2+ consecutive buckets while the pool averaged >= 4 requests
  // per server in each (random routing leaves one idle that long with odds of about 3 in 10,000).
  const double bucket_s = span_s / static_cast<double>(buckets);
  int starved = 0;
  std::string worst;
  size_t worst_len = 0;
  for (size_t i = 0; i < n; ++i) {
    size_t run = 0, run_start = 0;
    for (size_t b = 0; b <= buckets; ++b) {
      bool busy_pool = false, got_none = false;
      if (b < buckets) {
        int64_t in_bucket = 0;
        for (size_t k = 0; k < n; ++k) in_bucket += bucket_server[b * n + k];
        busy_pool = static_cast<double>(in_bucket) >= 4.0 * static_cast<double>(n);
        got_none = bucket_server[b * n + i] == 0;
      }
      if (busy_pool && got_none) {
        if (run == 0) run_start = b;
        ++run;
        continue;
      }
      if (run >= 2) {
        ++starved;
        if (run > worst_len) {
          worst_len = run;
          worst = absl::StrCat("server ", i, " from ", Num(static_cast<double>(run_start) * bucket_s), " s to ",
                               Num(static_cast<double>(run_start + run) * bucket_s), " s");
        }
      }
      run = 0;
    }
  }
  if (starved > 0)
    rep.flags.push_back({"starvation", absl::StrCat(starved, " windows where a server received nothing while the pool "
                                                    "averaged 4 or more requests per server; longest: ", worst)});
}

// A policy whose block hit rate is below half of the best one's (when the best reaches 0.1).
void AddHitRateGapFlags(ReplayReport& report) {
  const ReplayPolicyReport* best = nullptr;
  for (const ReplayPolicyReport& p : report.policies)
    if (!best || p.block_hit_rate > best->block_hit_rate) best = &p;
  if (!best || best->block_hit_rate < 0.1) return;
  const std::string best_name = best->name;
  const double best_rate = best->block_hit_rate;
  for (ReplayPolicyReport& p : report.policies)
    if (p.block_hit_rate < 0.5 * best_rate)
      p.flags.push_back({"hit-rate-gap", absl::StrCat("block hit rate ", Num(p.block_hit_rate), " is less than half of ",
                                                      best_name, "'s ", Num(best_rate))});
}

ReplayTraceInfo Analyze(const std::vector<ReplayRequest>& trace, int64_t pooled_capacity_blocks, int block_size_tokens,
                        replay_internal::PromptRenderer& renderer, const std::vector<SimParams>& servers) {
  ReplayTraceInfo info;
  info.requests = static_cast<int64_t>(trace.size());
  if (trace.empty()) return info;
  info.duration_s = static_cast<double>(trace.back().arrival_us - trace.front().arrival_us) / 1e6;
  absl::flat_hash_set<uint64_t> seen;
  BlockLru pooled(pooled_capacity_blocks);
  int64_t upper_hits = 0, pooled_hits = 0;
  std::vector<uint64_t> h, hs;
  // The TTFT bound hashes at the servers' block size, as the simulator's cache does.
  const int sim_block = servers.empty() ? block_size_tokens : servers.front().block_size;
  absl::flat_hash_set<uint64_t> seen_sim;
  std::vector<double> bounds;
  if (!servers.empty()) bounds.reserve(trace.size());
  for (const ReplayRequest& r : trace) {
    info.prompt_tokens += r.prompt_tokens;
    const std::string_view text = renderer.Render(r);
    h = ChainedBlockHashes(text, static_cast<size_t>(block_size_tokens) * kCharsPerToken, PrefixSeed(r.model));
    if (!servers.empty()) {
      if (sim_block != block_size_tokens) hs = ChainedBlockHashes(text, static_cast<size_t>(sim_block) * kCharsPerToken, PrefixSeed(r.model));
      const std::vector<uint64_t>& b = sim_block != block_size_tokens ? hs : h;
      size_t hit = 0;
      while (hit < b.size() && seen_sim.count(b[hit])) ++hit;
      const int64_t prompt = std::max<int64_t>(1, r.prompt_tokens);
      const int64_t cached = std::min<int64_t>(static_cast<int64_t>(hit) * sim_block, prompt - 1);
      int64_t best = std::numeric_limits<int64_t>::max();
      for (const SimParams& p : servers) best = std::min(best, LoneFirstStepMicros(p, prompt - cached));
      bounds.push_back(static_cast<double>(best) / 1e6);
      seen_sim.insert(b.begin(), b.end());
    }
    info.blocks += static_cast<int64_t>(h.size());
    // The pooled cache serves the longest leading run it holds, as a server's prefix cache does.
    size_t run = 0;
    while (run < h.size() && pooled.Contains(h[run])) ++run;
    pooled_hits += static_cast<int64_t>(run);
    for (uint64_t b : h) upper_hits += !seen.insert(b).second;
    for (size_t k = h.size(); k-- > 0;) pooled.Touch(h[k]);  // first block most recent
  }
  if (info.blocks > 0) {
    info.upper_bound_block_hit_rate = static_cast<double>(upper_hits) / static_cast<double>(info.blocks);
    info.pooled_cache_bound_block_hit_rate = static_cast<double>(pooled_hits) / static_cast<double>(info.blocks);
  }
  if (!bounds.empty()) {
    info.ttft_bound_s = Summarize(bounds);
    const size_t keep = std::min<size_t>(2000, bounds.size());
    for (size_t k = 0; k < keep; ++k) info.ttft_bound_samples_s.push_back(bounds[k * bounds.size() / keep]);
  }
  return info;
}

}  // namespace

ReplayTraceInfo AnalyzeTrace(const std::vector<ReplayRequest>& trace, int64_t pooled_capacity_blocks, int block_size_tokens,
                             const std::vector<SimParams>& servers) {
  replay_internal::PromptRenderer renderer;
  return Analyze(trace, pooled_capacity_blocks, block_size_tokens, renderer, servers);
}

namespace {

// RunReplay's steps. The inputs are checked and what every policy shares is derived once
// (ReplaySetup); then each policy replays the whole trace on a fresh pool of its own
// (PolicyRun), so the policies compare on the same requests and the same hardware.

// A disaggregated (llm-d P/D) pool: ReplayOptions::prefill_servers / decode_servers.
bool IsPdPool(const ReplayOptions& options) { return options.prefill_servers > 0 || options.decode_servers > 0; }

int ServerCount(const ReplayOptions& options) {
  return IsPdPool(options) ? options.prefill_servers + options.decode_servers : options.servers;
}

// The options and the trace, before anything is built (ServerParams checks each server's own
// parameters). The first problem found is the one reported.
absl::Status ValidateInputs(const std::vector<ReplayRequest>& trace, const std::vector<ReplayPolicy>& policies,
                            const ReplayOptions& options) {
  const bool pd_pool = IsPdPool(options);
  if (options.prefill_servers < 0 || options.decode_servers < 0)
    return absl::InvalidArgumentError("prefill and decode server counts must be >= 0");
  if (pd_pool && (options.prefill_servers == 0 || options.decode_servers == 0))
    return absl::InvalidArgumentError("a P/D pool needs at least one prefill and one decode server");
  if (pd_pool && !(options.kv_link_gbytes_per_s > 0)) return absl::InvalidArgumentError("kv_link_gbytes_per_s must be > 0");
  if (pd_pool && options.kv_bytes_per_token < 0) return absl::InvalidArgumentError("kv_bytes_per_token must be >= 0");
  const int server_count = ServerCount(options);
  if (server_count <= 0) return absl::InvalidArgumentError("servers must be > 0");
  if (options.epp_replicas < 1 || options.epp_replicas > 64) return absl::InvalidArgumentError("epp_replicas must be in [1, 64]");
  if (options.shared_state_delay_us < 0) return absl::InvalidArgumentError("shared_state_delay_us must be >= 0");
  if (options.kv_event_delay_us < 0) return absl::InvalidArgumentError("the KV event delay must be >= 0");
  if (options.scrape_interval_us <= 0) return absl::InvalidArgumentError("the metrics refresh interval must be > 0");
  if (!options.per_server.empty() && static_cast<int>(options.per_server.size()) != server_count)
    return absl::InvalidArgumentError("per-server parameters must list every server");
  if (policies.empty()) return absl::InvalidArgumentError("no policy to replay");
  for (size_t i = 1; i < trace.size(); ++i)
    if (trace[i].arrival_us < trace[i - 1].arrival_us) return absl::InvalidArgumentError("the trace is not sorted by arrival time");
  return absl::OkStatus();
}

// One SimParams per server (ReplayOptions::per_server, or copies of `server`), each with its own
// seed and at least one model, validated.
absl::StatusOr<std::vector<SimParams>> ServerParams(const ReplayOptions& options) {
  std::vector<SimParams> params(static_cast<size_t>(ServerCount(options)), options.server);
  if (!options.per_server.empty()) params = options.per_server;
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].seed = options.seed + i;
    if (params[i].models.empty()) params[i].models = {"model"};
    EPP_RETURN_IF_ERROR(params[i].Validate());
  }
  return params;
}

// The pooled-cache bound's size: every server's KV cache, in the analysis's 16-token blocks.
int64_t PooledCapacityBlocks(const std::vector<SimParams>& params) {
  int64_t total_kv = 0;
  for (const SimParams& p : params) total_kv += p.kv_blocks * p.block_size / 16;
  return total_kv;
}

// What every policy's run shares: the checked inputs and the figures derived from them.
struct ReplaySetup {
  const std::vector<ReplayRequest>& trace;
  const ReplayOptions& options;
  std::vector<SimParams> params;          // one per server
  bool pd_pool = false;                   // IsPdPool
  int sim_block = 0;                      // the servers' block size (what their caches hash)
  std::vector<std::string> trace_models;  // the trace's models, in first-use order
  int64_t t0 = 0;                         // the first arrival: virtual time starts there
  int64_t span = 1;                       // first to last arrival + 1 us: the timeline's width
  size_t buckets = 1;                     // points of the hit-rate timeline
  double total_work = 0;                  // requests x policies, for ReplayOptions::progress
};

ReplaySetup MakeSetup(const std::vector<ReplayRequest>& trace, const std::vector<ReplayPolicy>& policies,
                      const ReplayOptions& options, std::vector<SimParams> params) {
  ReplaySetup setup{trace, options, std::move(params)};
  setup.pd_pool = IsPdPool(options);
  setup.sim_block = setup.params.front().block_size;
  {
    absl::flat_hash_set<std::string> seen;
    for (const ReplayRequest& r : trace)
      if (seen.insert(r.model).second) setup.trace_models.push_back(r.model);
  }
  setup.t0 = trace.empty() ? 0 : trace.front().arrival_us;
  setup.span = trace.empty() ? 1 : std::max<int64_t>(1, trace.back().arrival_us - setup.t0 + 1);
  setup.buckets = static_cast<size_t>(std::max(1, options.timeline_buckets));
  setup.total_work = static_cast<double>(trace.size() * policies.size());
  return setup;
}

// One policy's replay of the trace: its EPP replicas, its servers and their endpoints, the event
// loop's queues and what it measures. The first five methods are the steps RunPolicy calls, in
// order; the others are the event loop's parts (the file comment gives the event order). A
// struct: its fields are the state the former lambdas of RunReplay shared, under the same names.
struct PolicyRun {
  PolicyRun(const ReplaySetup& setup, const ReplayPolicy& policy, replay_internal::PromptRenderer& renderer)
      : setup(setup), policy(policy), renderer(renderer) {}

  // Independent EPP replicas behind one gateway (round robin): each has its own state; with a
  // precise prefix producer each also gets every server's KV events.
  absl::Status BuildReplicas(const PluginRegistry& registry);
  // The simulated servers and the endpoints the replicas see: multi-profile policies (P/D) get
  // the labelled pool, the others the same servers unlabelled.
  absl::Status BuildPool();
  // The event loop: scrapes due, then each arrival is picked by the next replica and submitted.
  absl::Status ReplayTrace(size_t policy_index);
  // Every request still on a server runs to its end.
  absl::Status Drain();
  // The policy's line of the report, from what the run measured.
  ReplayPolicyReport Report(const Percentiles& ttft_bound, std::chrono::steady_clock::time_point wall0);

  void DeliverKvEvents(int64_t now_us);
  // Shared state: the prefix updates due by now reach the other replicas, and every
  // shared_state_delay_us each replica's picks start counting the others' in-flight requests as
  // they were then (serve's refresh, in virtual time).
  void ShareState(int64_t now_us);
  absl::Status PickAndSubmit(const ReplayRequest& r, const InferenceRequest& req, size_t replica);
  // The request the EPP receives for `r` (fills and returns `req`).
  const InferenceRequest& RequestFor(const ReplayRequest& r);
  // Flow control: the layer of each replica (BuildReplicas), an arrival entering it, the
  // dispatch and expiry cycles run after anything that may free capacity, and the event loop
  // that steps servers one event at a time while requests wait (so capacity frees when a request
  // ends, as at a real response end, not at the next scrape).
  absl::Status BuildFlowControl(const PluginRegistry& registry);
  absl::Status Enqueue(const ReplayRequest& r, size_t replica);
  absl::Status RunFlowCycles(int64_t now_us);
  absl::Status StepUntil(int64_t until, int64_t& next_scrape, bool draining);
  size_t Queued() const;
  void Drop(const ReplayRequest& r, std::string_view reason);
  size_t BandOf(int priority);
  size_t TenantOf(const std::string& tenant);
  void AccountHits(const Pending& pd, const SimRequestResult& res);
  void Collect(size_t s);
  void FinishPrefill(size_t s, const Pending& pd, const std::optional<SimRequestResult>& res, bool rejected);
  void FinishRequest(size_t s, const Pending& pd, const std::optional<SimRequestResult>& res, bool rejected);
  absl::Status AdvancePd(int64_t until);
  void Scrape(int64_t t);
  void ReportGroups();

  const ReplaySetup& setup;
  const ReplayPolicy& policy;
  replay_internal::PromptRenderer& renderer;  // shared by the analysis and every policy's run
  const ReplayOptions& options = setup.options;
  const std::vector<SimParams>& params = setup.params;
  const int sim_block = setup.sim_block;
  const int64_t t0 = setup.t0, span = setup.span;
  const size_t buckets = setup.buckets;

  // The EPP replicas (the schedulers use the clock, their RNG and the shared-state hub: declared
  // after them).
  ManualClock clock{t0};
  std::vector<std::unique_ptr<SeededRng>> rngs;
  std::unique_ptr<PrefixBusHub> shared_prefix;  // ReplayOptions::shared_state with replicas
  int64_t next_load_share_us = 0;
  std::vector<std::unique_ptr<Scheduler>> replicas;
  std::vector<const KvEventsBinding*> kv_of;
  bool kv_on = false;  // a precise policy: the servers publish what their caches do
  bool on_pd = false;  // runs on the P/D pool
  // The pool.
  std::vector<std::unique_ptr<SimServer>> servers;
  std::vector<Endpoint> endpoints = std::vector<Endpoint>(params.size());
  absl::flat_hash_map<std::string, size_t> server_of;
  // A server's metrics change only when a request is submitted or one of its events passes;
  // otherwise a scrape would read what the previous one did and is skipped.
  std::vector<char> dirty = std::vector<char>(params.size(), 1);
  // The event loop's queues.
  std::vector<SimEvent> events;
  std::priority_queue<KvDelivery, std::vector<KvDelivery>, std::greater<KvDelivery>> kv_in_flight;
  std::priority_queue<Deferred, std::vector<Deferred>, std::greater<Deferred>> deferred;
  std::vector<int> prefill_pending = std::vector<int>(params.size(), 0);
  absl::flat_hash_map<uint64_t, Pending> pending;
  uint64_t next_id = 1;
  // Flow control (empty when the policy's config does not turn it on).
  std::vector<std::unique_ptr<flowcontrol::FlowController>> flows;
  absl::Status flow_error;  // a dispatch callback's failure, returned by the loop
  InferenceRequest req;     // RequestFor's
  // What the run measures.
  ReplayPolicyReport rep;
  std::vector<GroupAcc> bands, tenants;
  absl::flat_hash_map<int, size_t> band_of;
  absl::flat_hash_map<std::string, size_t> tenant_of;
  std::vector<double> flow_wait;
  int64_t last_arrival = 0;
  int64_t slo_ttft_with = 0, slo_tpot_with = 0, slo_ttft_met = 0, slo_tpot_met = 0, slo_all_met = 0;
  std::vector<double> itl;
  int64_t transfer_us_sum = 0;
  int64_t scrapes = 0;
  std::vector<double> ttft, e2e, queue;
  int64_t hit_blocks = 0, all_blocks = 0, hit_tokens = 0, all_tokens = 0, wrong = 0, judged = 0;
  int64_t first_arrival = INT64_MAX, last_finish = 0;
  std::vector<int64_t> bucket_hits = std::vector<int64_t>(buckets, 0), bucket_blocks = std::vector<int64_t>(buckets, 0);
  std::vector<int64_t> bucket_server = std::vector<int64_t>(buckets * params.size(), 0);  // requests per (bucket, server)
};

absl::Status PolicyRun::BuildReplicas(const PluginRegistry& registry) {
  const int n = std::max(1, options.epp_replicas);
  if (options.shared_state && n > 1)
    shared_prefix = std::make_unique<PrefixBusHub>(n, options.shared_state_delay_us, [this] { return clock.NowMicros(); });
  for (int r = 0; r < n; ++r) {
    rngs.push_back(std::make_unique<SeededRng>(options.seed + static_cast<uint64_t>(r)));
    PluginContext ctx{&clock, rngs.back().get()};
    if (shared_prefix) ctx.shared_prefix = shared_prefix->Member(r);
    EPP_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> built, BuildScheduler(policy.config, registry, ctx));
    kv_of.push_back(built->KvEvents());
    replicas.push_back(std::move(built));
  }
  kv_on = kv_of.front() != nullptr;
  return BuildFlowControl(registry);
}

absl::Status PolicyRun::BuildFlowControl(const PluginRegistry& registry) {
  if (!flowcontrol::FlowControlEnabled(policy.config)) return absl::OkStatus();
  rep.flow_control = true;
  for (size_t i = 0; i < replicas.size(); ++i) {
    absl::StatusOr<flowcontrol::ControllerConfig> fc = flowcontrol::BuildControllerConfig(policy.config, *replicas[i], registry);
    if (!fc.ok()) return absl::InvalidArgumentError(absl::StrCat("policy ", policy.name, ": ", fc.status().message()));
    const Scheduler* scheduler = replicas[i].get();
    // No dispatcher thread: RunFlowCycles drives the layer in virtual time.
    flows.push_back(std::make_unique<flowcontrol::FlowController>(
        *std::move(fc), [this, scheduler] { return flowcontrol::SamplePool(*scheduler, endpoints); }, clock));
  }
  return absl::OkStatus();
}

size_t PolicyRun::BandOf(int priority) {
  auto [it, added] = band_of.try_emplace(priority, bands.size());
  if (added) bands.push_back(GroupAcc{std::to_string(priority)});
  return it->second;
}

size_t PolicyRun::TenantOf(const std::string& tenant) {
  auto [it, added] = tenant_of.try_emplace(tenant, tenants.size());
  if (added) tenants.push_back(GroupAcc{tenant});
  return it->second;
}

void PolicyRun::Drop(const ReplayRequest& r, std::string_view reason) {
  rep.shed++;
  rep.drops[reason.empty() ? std::string("unspecified") : std::string(reason)]++;
  bands[BandOf(r.priority)].dropped++;
  tenants[TenantOf(r.tenant)].dropped++;
}

size_t PolicyRun::Queued() const {
  size_t n = 0;
  for (const auto& f : flows) n += f->queued();
  return n;
}

const InferenceRequest& PolicyRun::RequestFor(const ReplayRequest& r) {
  req.path = "/v1/completions";
  req.model = r.model;
  req.prompt.assign(renderer.Render(r));
  req.prompt_tokens = r.prompt_tokens;
  req.priority = r.priority;
  req.fairness_id = r.tenant;
  // The SLOs travel as llm-d's headers, as a client sends them.
  req.headers.clear();
  if (r.slo_ttft_ms >= 0) req.headers.emplace_back(std::string(flowcontrol::kSloTtftHeader), std::to_string(r.slo_ttft_ms));
  if (r.slo_tpot_ms >= 0) req.headers.emplace_back(std::string(flowcontrol::kSloTpotHeader), std::to_string(r.slo_tpot_ms));
  return req;
}

// An arrival enters its replica's layer: answered at once (capacity), or queued until a cycle
// dispatches it (then picked and submitted at that virtual time) or drops it.
absl::Status PolicyRun::Enqueue(const ReplayRequest& r, size_t replica) {
  flowcontrol::EnqueueRequest e;
  e.request_id = std::to_string(next_id);
  e.fairness_id = r.tenant;
  e.priority = r.priority;
  e.bytes = static_cast<uint64_t>(std::max<int64_t>(1, r.prompt_tokens)) * kCharsPerToken;
  e.received_us = r.arrival_us;
  const ReplayRequest* rp = &r;
  flows[replica]->Enqueue(std::move(e), [this, rp, replica](const flowcontrol::Completion& c) {
    if (c.outcome != flowcontrol::Outcome::kDispatched) {
      const bool empty = endpoints.empty();
      Drop(*rp, flowcontrol::AnswerFor(c.outcome, empty).reason);
      return;
    }
    flow_wait.push_back(static_cast<double>(c.waited_us) / 1e6);
    bands[BandOf(rp->priority)].wait.push_back(static_cast<double>(c.waited_us) / 1e6);
    tenants[TenantOf(rp->tenant)].wait.push_back(static_cast<double>(c.waited_us) / 1e6);
    absl::Status st = PickAndSubmit(*rp, RequestFor(*rp), replica);
    if (!st.ok() && flow_error.ok()) flow_error = st;
  });
  return flow_error;
}

// Expiry, then dispatch while each layer finds capacity (every cycle samples the pool afresh, and
// a dispatched request's pick counts in the scheduler's in-flight load at once).
absl::Status PolicyRun::RunFlowCycles(int64_t now_us) {
  for (auto& f : flows) {
    if (f->queued() == 0) continue;
    f->ExpireOnce(now_us);
    while (f->queued() > 0 && f->DispatchOnce()) {
    }
  }
  return flow_error;
}

// Flow control's event loop up to `until`: scrapes as the plain loop has them, and, while requests
// wait, every server event in time order (a request ending frees capacity then). With `draining`
// (the trace has ended) it runs until nothing waits; a layer that can never dispatch (a pool
// saturated with nothing running) is shut down, its requests answered as the reference does then.
absl::Status PolicyRun::StepUntil(int64_t until, int64_t& next_scrape, bool draining) {
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  int idle_scrapes = 0;
  while (!draining || Queued() > 0) {
    int64_t t_server = kNever;
    size_t s_next = 0;
    if (Queued() > 0) {
      for (size_t s = 0; s < servers.size(); ++s) {
        const int64_t t = servers[s]->NextEventTime();
        if (t < t_server) {
          t_server = t;
          s_next = s;
        }
      }
      if (!deferred.empty()) t_server = std::min(t_server, deferred.top().t_us);
    }
    const int64_t t = std::min(next_scrape, t_server);
    if (t > until) break;
    EPP_RETURN_IF_ERROR(AdvancePd(t));
    if (next_scrape <= t_server) {
      Scrape(next_scrape);
      next_scrape += options.scrape_interval_us;
      idle_scrapes = t_server == kNever ? idle_scrapes + 1 : 0;
    } else if (servers[s_next]->NextEventTime() == t) {
      servers[s_next]->AdvanceTo(t, &events);
      dirty[s_next] = 1;
      Collect(s_next);
    }
    clock.Set(std::max(clock.NowMicros(), t));
    DeliverKvEvents(t);
    EPP_RETURN_IF_ERROR(RunFlowCycles(t));
    if (draining && idle_scrapes > 2 && Queued() > 0) {
      for (auto& f : flows) f->Shutdown();
      break;
    }
  }
  return absl::OkStatus();
}

absl::Status PolicyRun::BuildPool() {
  on_pd = setup.pd_pool && replicas.front()->ProfileNames().size() > 1;
  for (size_t i = 0; i < params.size(); ++i) {
    SimParams p = params[i];
    p.kv_events = kv_on;  // a precise policy: the servers publish what their caches do
    // Every model the trace uses is served by every server.
    for (const std::string& m : setup.trace_models)
      if (std::find(p.models.begin(), p.models.end(), m) == p.models.end()) p.models.push_back(m);
    EPP_ASSIGN_OR_RETURN(auto s, SimServer::Create(p));
    servers.push_back(std::move(s));
    endpoints[i].address = absl::StrCat("10.0.", i / 250, ".", i % 250 + 1, ":8000");
    endpoints[i].engine = p.engine;
    endpoints[i].metrics.cache_block_size = p.block_size;
    endpoints[i].metrics.cache_num_blocks = p.kv_blocks;
    server_of[endpoints[i].address] = i;
  }
  rep.name = policy.name;
  rep.disaggregated_pool = on_pd;
  rep.precise = kv_on;
  // The P/D roles as llm-d labels them (the disagg-profile-handler's filters read them).
  for (size_t i = 0; i < params.size(); ++i) {
    std::string role;
    if (on_pd) role = static_cast<int>(i) < options.prefill_servers ? "prefill" : "decode";
    if (!role.empty()) endpoints[i].labels["llm-d.ai/role"] = role;
    rep.server_roles.push_back(role);
  }
  rep.requests_per_server.assign(params.size(), 0);
  rep.kv_usage_mean_per_server.assign(params.size(), 0.0);
  return absl::OkStatus();
}

// The prompt's cache hits, pool-wide and in the request's timeline bucket.
void PolicyRun::AccountHits(const Pending& pd, const SimRequestResult& res) {
  const int64_t cached_blocks = res.cached_tokens / sim_block;
  hit_blocks += cached_blocks;
  all_blocks += pd.blocks;
  hit_tokens += res.cached_tokens;
  all_tokens += res.prompt_tokens;
  bucket_hits[pd.bucket] += cached_blocks;
  bucket_blocks[pd.bucket] += pd.blocks;
}

// What server `s` did since it was last advanced: its KV events start on their way to the
// replicas, and each event in `events` is accounted (a first token, a finished or rejected stage).
void PolicyRun::Collect(size_t s) {
  if (kv_on) {
    std::vector<KvEvent> kv = servers[s]->TakeKvEvents();
    if (!kv.empty()) kv_in_flight.push(KvDelivery{servers[s]->now_us() + options.kv_event_delay_us, s, std::move(kv)});
  }
  for (const SimEvent& ev : events) {
    if (ev.kind == SimEvent::Kind::kFirstToken) {
      // The response path's first token (aggregated requests; a P/D request's first token
      // is not its server's alone).
      auto it = pending.find(ev.id);
      if (it != pending.end() && !it->second.pd)
        replicas[it->second.replica]->ObserveFirstToken(it->second.pick_id, endpoints[s].address, ev.time_us);
      continue;
    }
    auto it = pending.find(ev.id);
    if (it == pending.end()) continue;
    const Pending pd = it->second;
    pending.erase(it);
    std::optional<SimRequestResult> res = servers[s]->TakeResult(ev.id);
    const bool rejected = ev.kind == SimEvent::Kind::kRejected || !res || res->rejected;
    if (pd.prefill_stage) {
      FinishPrefill(s, pd, res, rejected);
    } else {
      FinishRequest(s, pd, res, rejected);
    }
  }
  events.clear();
}

// A P/D request's prefill stage ended on `s`: its decode stage waits for the KV transfer
// (`deferred`), or the request fails with it.
void PolicyRun::FinishPrefill(size_t s, const Pending& pd, const std::optional<SimRequestResult>& res, bool rejected) {
  --prefill_pending[s];
  if (rejected) {
    replicas[pd.replica]->Release(endpoints[pd.decode_server].address, pd.load_tokens);
    rep.failed++;
    return;
  }
  // The prompt was computed here: its cache hits are the request's.
  AccountHits(pd, *res);
  // The decode server receives the KV of the tokens it does not hold itself.
  const size_t d = pd.decode_server;
  SimRequest dr = pd.decode_req;
  const int64_t local = std::min(dr.prompt_tokens, servers[d]->CachedPrefixBlocks(dr.block_hashes) * sim_block);
  dr.remote_prefilled_tokens = dr.prompt_tokens - local;
  const double bytes = static_cast<double>(dr.remote_prefilled_tokens) * static_cast<double>(options.kv_bytes_per_token);
  Pending next = pd;
  next.prefill_stage = false;
  next.server = d;
  next.transfer_us = std::llround(bytes / (options.kv_link_gbytes_per_s * 1e9) * 1e6);
  next.prefill_queue_us = res->admitted_us - res->arrival_us;
  pending.emplace(dr.id, next);
  deferred.push(Deferred{res->finish_us + next.transfer_us, d, std::move(dr)});
}

// A request ended on `s` (an aggregated one, or a P/D request's decode stage): the replica's load
// is released, its latencies recorded and the EPP's prefix prediction judged.
void PolicyRun::FinishRequest(size_t s, const Pending& pd, const std::optional<SimRequestResult>& res, bool rejected) {
  replicas[pd.replica]->Release(endpoints[s].address, pd.load_tokens);
  if (rejected) {
    rep.failed++;
    return;
  }
  rep.completed++;
  {
    // The response path's end: what predicted-latency-producer trains from (a streamed response
    // of output_tokens tokens, with its usage).
    ResponseCompletion done;
    done.at_us = res->finish_us;
    done.usage.prompt_tokens = static_cast<double>(res->prompt_tokens);
    done.usage.completion_tokens = static_cast<double>(res->output_tokens);
    done.usage.total_tokens = done.usage.prompt_tokens + done.usage.completion_tokens;
    done.chunks = res->output_tokens;
    done.streamed = true;
    replicas[pd.replica]->ObserveCompletion(pd.pick_id, endpoints[s].address, done);
  }
  ttft.push_back(static_cast<double>(res->first_token_us - pd.arrival_us) / 1e6);
  {
    // SLOs: TTFT from the arrival at the EPP; TPOT over the tokens after the first.
    const ReplayRequest& r = setup.trace[pd.trace_index];
    const int64_t ttft_us = res->first_token_us - pd.arrival_us;
    const bool ttft_ok = r.slo_ttft_ms < 0 || ttft_us <= r.slo_ttft_ms * 1000;
    const bool tpot_ok = r.slo_tpot_ms < 0 || res->output_tokens <= 1 ||
                         static_cast<double>(res->finish_us - res->first_token_us) / static_cast<double>(res->output_tokens - 1) <=
                             static_cast<double>(r.slo_tpot_ms) * 1000.0;
    slo_ttft_met += r.slo_ttft_ms >= 0 && ttft_ok;
    slo_tpot_met += r.slo_tpot_ms >= 0 && tpot_ok;
    slo_all_met += (r.slo_ttft_ms >= 0 || r.slo_tpot_ms >= 0) && ttft_ok && tpot_ok;
  }
  bands[pd.band].completed++;
  bands[pd.band].ttft.push_back(ttft.back());
  tenants[pd.tenant].completed++;
  tenants[pd.tenant].ttft.push_back(ttft.back());
  if (!flows.empty()) {
    // The band's fairness policy learns what the flow's request cost (program-aware fairness).
    ResponseUsage usage;
    usage.prompt_tokens = static_cast<double>(res->prompt_tokens);
    usage.completion_tokens = static_cast<double>(res->output_tokens);
    usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
    usage.cached_tokens = static_cast<double>(res->cached_tokens);
    flows[pd.replica]->Completed(setup.trace[pd.trace_index].priority, setup.trace[pd.trace_index].tenant, usage);
  }
  e2e.push_back(static_cast<double>(res->finish_us - pd.arrival_us) / 1e6);
  queue.push_back(static_cast<double>(pd.prefill_queue_us + res->admitted_us - res->arrival_us) / 1e6);
  if (res->output_tokens > 1)
    itl.push_back(static_cast<double>(res->finish_us - res->first_token_us) / 1e6 / static_cast<double>(res->output_tokens - 1));
  last_finish = std::max(last_finish, res->finish_us);
  if (pd.pd) {
    rep.disaggregated++;
    transfer_us_sum += pd.transfer_us;
    return;  // hits were counted at the prefill; the EPP predicted the decode server's
  }
  AccountHits(pd, *res);
  // The EPP's guess is wrong when it is off by at least one of the server's blocks, within
  // the window it hashes (maxPrefixBlocksToMatch caps what it can predict).
  if (!pd.predicts) return;
  ++judged;
  const int64_t truth = std::min(res->cached_tokens, pd.matchable_tokens);
  if (std::llabs(pd.predicted_tokens - truth) >= sim_block) ++wrong;
}

// P/D: runs the prefill servers' events and the decode stages due by `until`, in time order,
// so a decode stage starts exactly when its KV has arrived.
absl::Status PolicyRun::AdvancePd(int64_t until) {
  if (!on_pd) return absl::OkStatus();
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  while (true) {
    int64_t t_ev = kNever;
    size_t s_ev = 0;
    for (size_t s = 0; s < servers.size(); ++s) {
      if (prefill_pending[s] <= 0) continue;
      const int64_t t = servers[s]->NextEventTime();
      if (t < t_ev) {
        t_ev = t;
        s_ev = s;
      }
    }
    const int64_t t_def = deferred.empty() ? kNever : deferred.top().t_us;
    const int64_t t = std::min(t_ev, t_def);
    if (t == kNever || t > until) return absl::OkStatus();
    if (t_ev <= t_def) {
      servers[s_ev]->AdvanceTo(t_ev, &events);
      dirty[s_ev] = 1;
      Collect(s_ev);
    } else {
      Deferred d = deferred.top();
      deferred.pop();
      dirty[d.server] = 1;
      absl::Status st = servers[d.server]->Submit(d.request, std::max(d.t_us, servers[d.server]->now_us()), &events);
      if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat("policy ", policy.name, ": ", st.message()));
      Collect(d.server);
    }
  }
}

// The EPP's metrics refresh at `t` (--refresh-metrics-interval): every endpoint's metrics as its
// server has them then; also the samples of the per-server mean KV usage.
void PolicyRun::Scrape(int64_t t) {
  for (size_t s = 0; s < servers.size(); ++s) {
    Endpoint& e = endpoints[s];
    e.metrics_time_us = t;
    if (dirty[s] || servers[s]->NextEventTime() <= t) {
      servers[s]->AdvanceTo(t, &events);
      Collect(s);
      const SimSnapshot snap = servers[s]->Snapshot();
      e.metrics.waiting_queue_size = snap.waiting;
      e.metrics.running_requests = snap.running;
      e.metrics.kv_cache_usage = snap.kv_usage;
      dirty[s] = 0;
    }
    rep.kv_usage_mean_per_server[s] += e.metrics.kv_cache_usage.value_or(0);
  }
  ++scrapes;
}

// KV events that reached the EPPs by `now_us` are in their indexes.
void PolicyRun::DeliverKvEvents(int64_t now_us) {
  while (!kv_in_flight.empty() && kv_in_flight.top().t_us <= now_us) {
    KvEventBatch batch;
    batch.events = kv_in_flight.top().events;
    const size_t from = kv_in_flight.top().server;
    kv_in_flight.pop();
    for (const KvEventsBinding* b : kv_of) b->index->Apply(endpoints[from].address, "", batch);
  }
}

absl::Status PolicyRun::ReplayTrace(size_t policy_index) {
  int64_t next_scrape = t0;
  size_t done = 0;
  for (const ReplayRequest& r : setup.trace) {
    BandOf(r.priority);
    TenantOf(r.tenant);
    bands[band_of[r.priority]].requests++;
    tenants[tenant_of[r.tenant]].requests++;
    slo_ttft_with += r.slo_ttft_ms >= 0;
    slo_tpot_with += r.slo_tpot_ms >= 0;
    rep.slo_requests += r.slo_ttft_ms >= 0 || r.slo_tpot_ms >= 0;
    last_arrival = std::max(last_arrival, r.arrival_us);
  }
  for (const ReplayRequest& r : setup.trace) {
    if (!flows.empty()) {
      EPP_RETURN_IF_ERROR(StepUntil(r.arrival_us, next_scrape, false));
      EPP_RETURN_IF_ERROR(AdvancePd(r.arrival_us));
      clock.Set(std::max(clock.NowMicros(), r.arrival_us));
      first_arrival = std::min(first_arrival, r.arrival_us);
      DeliverKvEvents(r.arrival_us);
      const size_t replica = done % replicas.size();
      EPP_RETURN_IF_ERROR(Enqueue(r, replica));
      EPP_RETURN_IF_ERROR(RunFlowCycles(r.arrival_us));
      ++done;
      if (options.progress && (done & 1023) == 0)
        options.progress((static_cast<double>(policy_index * setup.trace.size() + done)) / std::max(1.0, setup.total_work));
      continue;
    }
    while (next_scrape <= r.arrival_us) {
      EPP_RETURN_IF_ERROR(AdvancePd(next_scrape));
      Scrape(next_scrape);
      next_scrape += options.scrape_interval_us;
    }
    EPP_RETURN_IF_ERROR(AdvancePd(r.arrival_us));
    clock.Set(r.arrival_us);
    first_arrival = std::min(first_arrival, r.arrival_us);
    DeliverKvEvents(r.arrival_us);
    EPP_RETURN_IF_ERROR(PickAndSubmit(r, RequestFor(r), done % replicas.size()));
    ++done;
    if (options.progress && (done & 1023) == 0)
      options.progress((static_cast<double>(policy_index * setup.trace.size() + done)) / std::max(1.0, setup.total_work));
  }
  // Requests still waiting in the layer dispatch as the servers finish what they run.
  if (!flows.empty()) EPP_RETURN_IF_ERROR(StepUntil(std::numeric_limits<int64_t>::max() - 1, next_scrape, true));
  return absl::OkStatus();
}

void PolicyRun::ShareState(int64_t now_us) {
  shared_prefix->DeliverDue(now_us);
  if (now_us < next_load_share_us) return;
  next_load_share_us = now_us + std::max<int64_t>(1, options.shared_state_delay_us);
  std::vector<std::vector<RemoteLoad>> own(replicas.size());
  for (size_t i = 0; i < replicas.size(); ++i)
    for (const Endpoint& e : endpoints) {
      const auto [requests, tokens] = replicas[i]->Inflight(e.address);
      if (requests != 0 || tokens != 0) own[i].push_back(RemoteLoad{e.address, requests, tokens});
    }
  for (size_t i = 0; i < replicas.size(); ++i) {
    std::vector<RemoteLoad> others;
    for (size_t j = 0; j < replicas.size(); ++j)
      if (j != i) others.insert(others.end(), own[j].begin(), own[j].end());
    replicas[i]->SetRemoteLoad(others);
  }
}

// One arrival: the replica's pick (a shed request ends here), then the request on the picked
// server, or, when the policy disaggregated it (the x-prefiller-host-port header of llm-d's P/D
// handler), its prefill stage on the prefill server with the decode stage to follow.
absl::Status PolicyRun::PickAndSubmit(const ReplayRequest& r, const InferenceRequest& req, size_t replica) {
  if (shared_prefix) ShareState(clock.NowMicros());
  PickResult pr = replicas[replica]->Pick(req, endpoints);
  if (pr.status != 200) {
    Drop(r, pr.dropped_reason);
    return absl::OkStatus();
  }
  const size_t s = server_of.at(pr.endpoints.front());
  Pending pd;
  pd.arrival_us = r.arrival_us;
  pd.server = s;
  pd.replica = replica;
  pd.predicted_tokens = static_cast<int64_t>(pr.prefix_match_blocks) * pr.prefix_block_size_tokens;
  // Without a prefix producer the EPP makes no prediction to judge.
  pd.predicts = pr.prefix_block_size_tokens > 0;
  pd.matchable_tokens = static_cast<int64_t>(pr.prefix_blocks) * pr.prefix_block_size_tokens;
  pd.load_tokens = pr.load_tokens;
  pd.pick_id = pr.pick_id;
  pd.trace_index = static_cast<size_t>(&r - setup.trace.data());
  pd.band = BandOf(r.priority);
  pd.tenant = TenantOf(r.tenant);
  if (clock.NowMicros() <= last_arrival) {
    // Dispatched while the trace was still arriving: the service its groups got under contention.
    bands[pd.band].served++;
    tenants[pd.tenant].served++;
  }
  pd.bucket = std::min(buckets - 1, static_cast<size_t>((r.arrival_us - t0) * static_cast<int64_t>(buckets) / span));
  SimRequest sr;
  sr.id = next_id++;
  sr.block_hashes = ChainedBlockHashes(req.prompt, static_cast<size_t>(sim_block) * kCharsPerToken, PrefixSeed(r.model));
  if (kv_on) sr.token_ids = EstimateTokenIds(req.prompt);  // what its BlockStored events carry
  pd.blocks = static_cast<int64_t>(sr.block_hashes.size());
  sr.prompt_tokens = std::max<int64_t>(1, r.prompt_tokens);
  sr.output_tokens = std::max<int64_t>(1, r.output_tokens);
  const std::string* prefiller = nullptr;
  for (const auto& [k, v] : pr.headers)
    if (k == "x-prefiller-host-port") prefiller = &v;
  size_t target = s;
  if (on_pd && prefiller != nullptr && server_of.count(*prefiller)) {
    // Prefill on the prefill server (one output token), decode later on s.
    target = server_of.at(*prefiller);
    pd.pd = true;
    pd.prefill_stage = true;
    pd.server = target;
    pd.decode_server = s;
    pd.decode_req = sr;
    pd.decode_req.id = next_id++;
    sr.output_tokens = 1;
    prefill_pending[target]++;
  }
  pending.emplace(sr.id, pd);
  rep.requests_per_server[target]++;
  if (target != s) rep.requests_per_server[s]++;
  bucket_server[pd.bucket * params.size() + s]++;
  dirty[target] = 1;
  // Now: the arrival, or later when flow control held the request.
  absl::Status st = servers[target]->Submit(sr, std::max(r.arrival_us, clock.NowMicros()), &events);
  if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat("policy ", policy.name, ": ", st.message()));
  Collect(target);
  return absl::OkStatus();
}

// Drain: the prefill stages and the decode stages they start, then every server until idle.
absl::Status PolicyRun::Drain() {
  EPP_RETURN_IF_ERROR(AdvancePd(std::numeric_limits<int64_t>::max() - 1));
  for (size_t s = 0; s < servers.size(); ++s) {
    for (int guard = 0; guard < 100000000; ++guard) {
      const int64_t t = servers[s]->NextEventTime();
      if (t == std::numeric_limits<int64_t>::max()) break;
      servers[s]->AdvanceTo(t, &events);
      Collect(s);
    }
  }
  return absl::OkStatus();
}

// Max-min fair shares of `total` among demands (water filling): a group asking less than an equal
// split of what is left gets what it asks; the others split the rest equally.
std::vector<double> MaxMinShares(const std::vector<double>& demand, double total) {
  std::vector<size_t> order(demand.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return demand[a] < demand[b]; });
  std::vector<double> share(demand.size(), 0);
  double left = total;
  for (size_t k = 0; k < order.size(); ++k) {
    const double equal = left / static_cast<double>(order.size() - k);
    share[order[k]] = std::min(demand[order[k]], equal);
    left -= share[order[k]];
  }
  return share;
}

// Jain's index of served / fair share over the groups with a fair share; NaN with fewer than two.
double JainFairness(const std::vector<double>& served, const std::vector<double>& demand) {
  double total = 0;
  for (double x : served) total += x;
  const std::vector<double> fair = MaxMinShares(demand, total);
  double sum = 0, sum_sq = 0;
  int n = 0;
  for (size_t i = 0; i < served.size(); ++i) {
    if (!(fair[i] > 0)) continue;
    const double x = served[i] / fair[i];
    sum += x;
    sum_sq += x * x;
    ++n;
  }
  if (n < 2 || !(sum_sq > 0)) return std::numeric_limits<double>::quiet_NaN();
  return sum * sum / (static_cast<double>(n) * sum_sq);
}

void PolicyRun::ReportGroups() {
  rep.flow_wait_s = Summarize(flow_wait);
  const double span_s = std::max(1e-6, static_cast<double>(last_arrival - t0) / 1e6);
  auto out = [&](std::vector<GroupAcc>& groups) {
    std::vector<ReplayGroupReport> v;
    for (GroupAcc& g : groups) {
      ReplayGroupReport r;
      r.name = g.name;
      r.requests = g.requests;
      r.completed = g.completed;
      r.dropped = g.dropped;
      r.ttft_s = Summarize(g.ttft);
      r.wait_s = Summarize(g.wait);
      r.served_rps = static_cast<double>(g.served) / span_s;
      r.demand_rps = static_cast<double>(g.requests) / span_s;
      v.push_back(std::move(r));
    }
    return v;
  };
  // Bands when priorities differ or the layer ran (highest priority first); tenants when named.
  if (bands.size() > 1 || rep.flow_control) {
    rep.bands = out(bands);
    std::sort(rep.bands.begin(), rep.bands.end(),
              [](const ReplayGroupReport& a, const ReplayGroupReport& b) { return std::stoi(a.name) > std::stoi(b.name); });
  }
  if (tenants.size() > 1 || (tenants.size() == 1 && !tenants.front().name.empty())) {
    rep.tenants = out(tenants);
    std::sort(rep.tenants.begin(), rep.tenants.end(),
              [](const ReplayGroupReport& a, const ReplayGroupReport& b) { return a.name < b.name; });
  }
  std::vector<double> served, demand;
  for (const ReplayGroupReport& t : rep.tenants) {
    served.push_back(t.served_rps);
    demand.push_back(t.demand_rps);
  }
  rep.jain_fairness = JainFairness(served, demand);
}

ReplayPolicyReport PolicyRun::Report(const Percentiles& ttft_bound, std::chrono::steady_clock::time_point wall0) {
  rep.failed += static_cast<int64_t>(pending.size());  // never finished (should not happen)
  rep.ttft_s = Summarize(ttft);
  rep.e2e_s = Summarize(e2e);
  rep.queue_s = Summarize(queue);
  rep.itl_s = Summarize(itl);
  rep.kv_transfer_s_mean = rep.disaggregated ? static_cast<double>(transfer_us_sum) / 1e6 / static_cast<double>(rep.disaggregated) : 0;
  if (!ttft.empty()) {
    const size_t keep = std::min<size_t>(2000, ttft.size());
    for (size_t k = 0; k < keep; ++k) rep.ttft_samples_s.push_back(ttft[k * ttft.size() / keep]);
  }
  rep.block_hit_rate = all_blocks ? static_cast<double>(hit_blocks) / static_cast<double>(all_blocks) : 0;
  rep.token_hit_rate = all_tokens ? static_cast<double>(hit_tokens) / static_cast<double>(all_tokens) : 0;
  rep.prediction_error_rate =
      judged ? static_cast<double>(wrong) / static_cast<double>(judged) : std::numeric_limits<double>::quiet_NaN();
  if (rep.completed > 0 && last_finish > first_arrival)
    rep.throughput_rps = static_cast<double>(rep.completed) / (static_cast<double>(last_finish - first_arrival) / 1e6);
  int64_t mx = 0, sum = 0;
  for (int64_t c : rep.requests_per_server) {
    mx = std::max(mx, c);
    sum += c;
  }
  rep.load_max_over_mean = sum ? static_cast<double>(mx) / (static_cast<double>(sum) / static_cast<double>(params.size())) : 0;
  for (double& k : rep.kv_usage_mean_per_server) k = scrapes ? k / static_cast<double>(scrapes) : 0;
  for (size_t b = 0; b < buckets; ++b)
    rep.hit_rate_timeline.push_back(bucket_blocks[b] ? static_cast<double>(bucket_hits[b]) / static_cast<double>(bucket_blocks[b]) : 0);
  const Percentiles& b = ttft_bound;
  auto ratio = [](double x, double y) { return y > 0 ? x / y : 0.0; };
  rep.ttft_over_bound = {ratio(rep.ttft_s.p50, b.p50), ratio(rep.ttft_s.p90, b.p90), ratio(rep.ttft_s.p99, b.p99),
                         ratio(rep.ttft_s.mean, b.mean)};
  ReportGroups();
  {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    auto share = [nan](int64_t met, int64_t with) { return with > 0 ? static_cast<double>(met) / static_cast<double>(with) : nan; };
    rep.slo_ttft_attainment = share(slo_ttft_met, slo_ttft_with);
    rep.slo_tpot_attainment = share(slo_tpot_met, slo_tpot_with);
    rep.slo_attainment = share(slo_all_met, rep.slo_requests);
    if (slo_all_met > 0 && last_finish > first_arrival)
      rep.goodput_rps = static_cast<double>(slo_all_met) / (static_cast<double>(last_finish - first_arrival) / 1e6);
  }
  AddLoadFlags(rep, bucket_server, buckets, static_cast<double>(span) / 1e6);
  rep.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return std::move(rep);
}

// One policy, start to end; wall_s counts all of it.
absl::StatusOr<ReplayPolicyReport> RunPolicy(const ReplaySetup& setup, const ReplayPolicy& policy, size_t policy_index,
                                             const PluginRegistry& registry, replay_internal::PromptRenderer& renderer,
                                             const Percentiles& ttft_bound) {
  const auto wall0 = std::chrono::steady_clock::now();
  PolicyRun run(setup, policy, renderer);
  EPP_RETURN_IF_ERROR(run.BuildReplicas(registry));
  EPP_RETURN_IF_ERROR(run.BuildPool());
  EPP_RETURN_IF_ERROR(run.ReplayTrace(policy_index));
  EPP_RETURN_IF_ERROR(run.Drain());
  return run.Report(ttft_bound, wall0);
}

}  // namespace

absl::StatusOr<ReplayReport> RunReplay(const std::vector<ReplayRequest>& trace, const std::vector<ReplayPolicy>& policies,
                                       const ReplayOptions& options) {
  EPP_RETURN_IF_ERROR(ValidateInputs(trace, policies, options));
  EPP_ASSIGN_OR_RETURN(std::vector<SimParams> params, ServerParams(options));
  const ReplaySetup setup = MakeSetup(trace, policies, options, std::move(params));
  ReplayReport report;
  replay_internal::PromptRenderer renderer;  // shared by the analysis and every policy's run
  report.trace = Analyze(trace, PooledCapacityBlocks(setup.params), 16, renderer, setup.params);
  const PluginRegistry registry = BuiltinRegistry();
  for (size_t pi = 0; pi < policies.size(); ++pi) {
    EPP_ASSIGN_OR_RETURN(ReplayPolicyReport rep,
                         RunPolicy(setup, policies[pi], pi, registry, renderer, report.trace.ttft_bound_s));
    report.policies.push_back(std::move(rep));
  }
  // Across policies, once all have run.
  AddHitRateGapFlags(report);
  if (options.progress) options.progress(1.0);
  return report;
}

}  // namespace epp
