// The scheduling cycle (see scheduler.h for the order of steps and the outcome rules).
//
// Deliberate deviation from GIE: when the primary profile's filters remove every candidate, GIE
// answers 429 ("failed to find target endpoint"); epp answers 503, because nothing was shed:
// no endpoint is eligible, which is what 503 means in the protocol (docs/scheduling.md).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/strings.h"
#include "epp/kv_subscriber.h"
#include "epp/scheduler.h"
#include "plugins/plugins.h"
#include "scheduling/scheduler_impl.h"

namespace epp {

using internal::Num;

void LoadTracker::Add(std::string_view endpoint, int64_t requests, int64_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& v = load_[absl::string_view(endpoint.data(), endpoint.size())];
  v.first = std::max<int64_t>(0, v.first + requests);
  v.second = std::max<int64_t>(0, v.second + tokens);
}

void LoadTracker::Snapshot(std::span<const Endpoint> endpoints, std::vector<int64_t>& requests,
                           std::vector<int64_t>& tokens) const {
  requests.assign(endpoints.size(), 0);
  tokens.assign(endpoints.size(), 0);
  std::lock_guard<std::mutex> lock(mu_);
  if (load_.empty()) return;
  for (size_t i = 0; i < endpoints.size(); ++i) {
    auto it = load_.find(endpoints[i].address);
    if (it == load_.end()) continue;
    requests[i] = it->second.first;
    tokens[i] = it->second.second;
  }
}

std::pair<int64_t, int64_t> LoadTracker::Get(std::string_view endpoint) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = load_.find(absl::string_view(endpoint.data(), endpoint.size()));
  return it == load_.end() ? std::pair<int64_t, int64_t>{0, 0} : it->second;
}

void LoadTracker::Forget(std::string_view endpoint) {
  std::lock_guard<std::mutex> lock(mu_);
  load_.erase(absl::string_view(endpoint.data(), endpoint.size()));
}

std::string_view ScorerCategoryName(ScorerCategory category) {
  switch (category) {
    case ScorerCategory::kAffinity:
      return "affinity";
    case ScorerCategory::kDistribution:
      return "distribution";
    case ScorerCategory::kBalance:
      return "balance";
  }
  return "unknown";
}

std::string PickResult::DestinationValue() const { return absl::StrJoin(endpoints, ","); }

PickResult PickResult::BadRequest(const absl::Status& parse_error) {
  PickResult r;
  r.status = 400;
  r.reason = std::string(parse_error.message());
  return r;
}

bool SubsetEntryMatches(std::string_view entry, std::string_view address) {
  entry = internal::TrimSpace(entry);
  if (entry.empty()) return false;
  if (entry == address) return true;
  // A bare IP (no port) matches every port of that IP. "[v6]" and "v6" both count as bare.
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) return false;
  std::string_view ip = address.substr(0, colon);
  if (entry == ip) return true;
  if (ip.size() > 2 && ip.front() == '[' && ip.back() == ']') return entry == ip.substr(1, ip.size() - 2);
  return false;
}

DurationHistogram TimingHistogram::Snapshot() const {
  DurationHistogram h;
  h.bucket_counts.resize(kBounds);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBounds; ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    h.bucket_counts[i] = cumulative;
  }
  h.count = cumulative + buckets_[kBounds].load(std::memory_order_relaxed);
  h.sum_seconds = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  return h;
}

namespace {

// One timer per (extension point, plugin instance), in the order a pick calls them. BuildScheduler
// fills Impl with plugins and profiles only; timers are derived here so that build.cc need not know.
void SetUpTimers(Scheduler::Impl& m) {
  std::map<std::pair<std::string_view, const Plugin*>, PluginTimer*> by_key;
  auto timer = [&](const char* extension_point, const Plugin* plugin) {
    PluginTimer*& t = by_key[{extension_point, plugin}];
    if (!t) {
      m.timers.push_back(std::make_unique<PluginTimer>());
      t = m.timers.back().get();
      t->extension_point = extension_point;
      t->plugin = plugin;
    }
    return t;
  };
  // Producers and observers are kept as interfaces; find the plugin that implements each.
  auto owner = [&](auto as, const void* iface) -> const Plugin* {
    for (const auto& p : m.plugins)
      if (static_cast<const void*>(((*p).*as)()) == iface) return p.get();
    return nullptr;
  };
  for (const DataProducer* d : m.producers)
    m.producer_timers.push_back(timer("DataProducer", owner(&Plugin::AsDataProducer, d)));
  if (m.detector) m.detector_timer = timer("SaturationDetector", m.detector_plugin);
  for (const Admitter* a : m.admitters) m.admitter_timers.push_back(timer("Admitter", owner(&Plugin::AsAdmitter, a)));
  m.profile_picker_timer = timer("ProfilePicker", m.handler_plugin);
  for (Profile& prof : m.profiles) {
    prof.filter_timers.clear();
    prof.scorer_timers.clear();
    for (const auto& f : prof.filters) prof.filter_timers.push_back(timer("Filter", f.first));
    for (const WeightedScorer& ws : prof.scorers) prof.scorer_timers.push_back(timer("Scorer", ws.plugin));
    prof.picker_timer = timer("Picker", prof.picker_plugin);
  }
  m.process_results_timer = timer("ProcessProfilesResults", m.handler_plugin);
  for (const RequestObserver* o : m.observers)
    m.observer_timers.push_back(timer("PreRequest", owner(&Plugin::AsRequestObserver, o)));
  m.first_token_observers.clear();
  for (const auto& p : m.plugins)
    if (auto* o = dynamic_cast<const FirstTokenObserver*>(p.get())) m.first_token_observers.push_back(o);
}

}  // namespace

Scheduler::Scheduler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) { SetUpTimers(*impl_); }
Scheduler::~Scheduler() = default;

int64_t Scheduler::EstimateLoadTokens(const InferenceRequest& request) {
  const int64_t input = std::max<int64_t>(1, request.prompt_tokens);
  return input + std::llround(1.5 * static_cast<double>(input));
}

namespace {

// Runs one profile; returns the picked endpoints (empty with `error` set when filters removed all).
std::vector<const Endpoint*> RunProfile(const Profile& profile, const SchedulingContext& ctx,
                                        const std::vector<const Endpoint*>& candidates, ProfileTrace* trace,
                                        std::string& error,
                                        std::vector<std::pair<std::string, double>>* scores_out = nullptr) {
  std::vector<const Endpoint*> cur = candidates;
  // Timing: one clock read per call boundary; consecutive filters share theirs (only a vector move
  // lies between them), trace work is excluded by a fresh read.
  int64_t t = profile.filters.empty() ? 0 : TimingNowNs();
  for (size_t fi = 0; fi < profile.filters.size(); ++fi) {
    const auto& [plugin, filter] = profile.filters[fi];
    std::vector<const Endpoint*> next = filter->Apply(ctx, cur);
    const int64_t t_end = TimingNowNs();
    profile.filter_timers[fi]->histogram.Record(t_end - t);
    t = t_end;
    if (trace) {
      FilterTrace ft{plugin->name(), plugin->type(), {}, {}};
      size_t j = 0;
      for (const Endpoint* e : cur) {
        if (j < next.size() && next[j] == e) {
          ft.kept.push_back(e->address);
          ++j;
        } else {
          ft.removed.push_back({e->address, filter->WhyRemoved(ctx, *e)});
        }
      }
      trace->filters.push_back(std::move(ft));
      t = TimingNowNs();
    }
    cur = std::move(next);
    if (cur.empty()) {
      error = absl::StrCat("filter '", plugin->name(), "' removed every remaining endpoint");
      return {};
    }
  }
  const size_t n = cur.size();
  std::vector<double> total(n, 0.0);
  std::vector<EndpointScoreTrace> score_trace;
  if (trace) {
    score_trace.resize(n);
    for (size_t i = 0; i < n; ++i) score_trace[i].endpoint = cur[i]->address;
  }
  // Every scorer first, back to back, so that consecutive scorers share a clock read; then the
  // weighted sum, in the same order as before.
  const size_t num_scorers = profile.scorers.size();
  std::vector<double> raw_all(num_scorers * n, 0.0);
  if (num_scorers > 0) {
    t = TimingNowNs();
    for (size_t si = 0; si < num_scorers; ++si) {
      profile.scorers[si].scorer->Score(ctx, cur, std::span<double>(raw_all).subspan(si * n, n));
      const int64_t t_end = TimingNowNs();
      profile.scorer_timers[si]->histogram.Record(t_end - t);
      t = t_end;
    }
  }
  for (size_t si = 0; si < num_scorers; ++si) {
    const WeightedScorer& ws = profile.scorers[si];
    const double* raw = raw_all.data() + si * n;
    for (size_t i = 0; i < n; ++i) {
      double s = raw[i];
      if (!(s >= 0)) s = 0;  // also NaN
      if (s > 1) s = 1;
      total[i] += ws.weight * s;
      if (trace)
        score_trace[i].scorers.push_back(
            {ws.plugin->name(), ws.plugin->type(), s, ws.weight, ws.weight * s, ws.scorer->Explain(ctx, *cur[i])});
    }
  }
  std::vector<ScoredEndpoint> scored(n);
  for (size_t i = 0; i < n; ++i) scored[i] = {cur[i], total[i]};
  if (scores_out != nullptr)
    for (size_t i = 0; i < n; ++i) scores_out->emplace_back(cur[i]->address, total[i]);
  const int64_t t_pick = TimingNowNs();
  std::vector<const Endpoint*> picked = profile.picker->Pick(ctx, scored);
  profile.picker_timer->histogram.Record(TimingNowNs() - t_pick);
  if (trace) {
    for (size_t i = 0; i < n; ++i) score_trace[i].total = total[i];
    std::stable_sort(score_trace.begin(), score_trace.end(),
                     [](const EndpointScoreTrace& a, const EndpointScoreTrace& b) { return a.total > b.total; });
    trace->scores = std::move(score_trace);
    trace->picker = profile.picker_plugin->name();
    for (const Endpoint* e : picked) trace->picked.push_back(e->address);
  }
  if (picked.empty()) error = absl::StrCat("picker '", profile.picker_plugin->name(), "' chose no endpoint");
  return picked;
}

}  // namespace

PickResult Scheduler::Pick(const InferenceRequest& request, std::span<const Endpoint> endpoints,
                           const PickOptions& options) const {
  const Impl& m = *impl_;
  ScopedTiming cycle_timing(m.cycle_timing);
  PickResult r;
  SchedulingContext ctx;
  ctx.request = &request;
  ctx.endpoints = endpoints;
  ctx.rng = m.rng;
  ctx.now_us = m.clock->NowMicros();

  std::vector<const Endpoint*> candidates;
  candidates.reserve(endpoints.size());
  for (const Endpoint& e : endpoints) {
    if (options.subset) {
      bool in = false;
      for (const std::string& s : *options.subset) in = in || SubsetEntryMatches(s, e.address);
      if (!in) continue;
    }
    candidates.push_back(&e);
  }
  // A server whose scrape was refused is gone; pass it over unless nothing else is left (then
  // the pick goes on over all of them, as without the signal).
  const size_t reachable = static_cast<size_t>(
      std::count_if(candidates.begin(), candidates.end(), [](const Endpoint* e) { return !e->unreachable; }));
  if (reachable > 0 && reachable < candidates.size()) {
    size_t kept = 0;
    for (const Endpoint* e : candidates) {
      if (e->unreachable) r.unreachable.push_back(e->address);
      else candidates[kept++] = e;
    }
    candidates.resize(kept);
  }
  r.candidates = static_cast<int>(candidates.size());
  if (candidates.empty()) {
    r.status = 503;
    if (!options.subset)
      r.reason = "no endpoints in the pool";
    else if (options.subset->empty())
      r.reason = "the subset hint is empty: no endpoint may serve the request";
    else
      r.reason = absl::StrCat("no endpoint of the pool matches the subset hint [", absl::StrJoin(*options.subset, ", "), "]");
    return r;
  }

  m.load->Snapshot(endpoints, ctx.inflight_requests, ctx.inflight_tokens);
  // Timing: producers and the detector run back to back and share their boundary clock reads.
  int64_t t = TimingNowNs();
  for (size_t i = 0; i < m.producers.size(); ++i) {
    m.producers[i]->Prepare(ctx, candidates);
    const int64_t t_end = TimingNowNs();
    m.producer_timers[i]->histogram.Record(t_end - t);
    t = t_end;
  }
  r.prefix_block_size_tokens = ctx.prefix.block_size_tokens;
  r.prefix_blocks = static_cast<int>(ctx.prefix.hashes.size());
  if (ctx.tokens.computed) {
    r.tokens = static_cast<int64_t>(ctx.tokens.ids.size());
    r.tokens_source = ctx.tokens.source;
    r.tokens_note = ctx.tokens.note;
  }

  if (m.detector) {
    r.saturation = m.detector->Saturation(ctx, candidates);
    if (options.trace || request.priority < 0) r.saturation_detail = m.detector->ExplainSaturation(ctx, candidates);
    m.detector_timer->histogram.Record(TimingNowNs() - t);
    if (request.priority < 0 && r.saturation >= 1.0) {
      r.status = 429;
      r.reason = absl::StrCat("system saturated, sheddable request dropped (priority ", request.priority,
                              ", saturation ", Num(r.saturation), " >= 1)");
      return r;
    }
  }

  for (size_t i = 0; i < m.admitters.size(); ++i) {
    std::string why;
    const int64_t t0 = TimingNowNs();
    const bool admitted = m.admitters[i]->Admit(ctx, candidates, why);
    m.admitter_timers[i]->histogram.Record(TimingNowNs() - t0);
    if (!admitted) {
      r.status = 429;
      r.reason = why;
      return r;
    }
  }

  // The profile loop: the handler names profiles to run (or skip) until it returns an empty step.
  std::vector<ProfileRun> runs;
  runs.reserve(m.profiles.size());
  // With options.scores: every scored candidate per run (aligned with `runs`; empty for skips).
  std::vector<std::vector<std::pair<std::string, double>>> run_scores;
  bool handler_done = false;
  for (int round = 0; round < 16; ++round) {  // bounded: a handler cannot loop forever
    const int64_t t0 = TimingNowNs();
    ProfileStep step = m.handler->PickProfiles(ctx, m.profile_names, runs);
    t = TimingNowNs();
    m.profile_picker_timer->histogram.Record(t - t0);
    handler_done = step.empty();
    if (handler_done) break;
    auto seen = [&](const std::string& name) {
      return std::any_of(runs.begin(), runs.end(), [&](const ProfileRun& pr) { return pr.profile == name; });
    };
    for (ProfileStep::Entry& skip : step.skip) {
      if (seen(skip.profile)) continue;
      if (options.trace) r.profiles.push_back(ProfileTrace{skip.profile, false, skip.reason, {}, {}, {}, {}, {}});
      runs.push_back(ProfileRun{std::move(skip.profile), false, {}, {}, std::move(skip.reason)});
      if (options.scores) run_scores.emplace_back();
    }
    for (ProfileStep::Entry& next : step.run) {
      auto it = std::find_if(m.profiles.begin(), m.profiles.end(), [&](const Profile& p) { return p.name == next.profile; });
      if (it == m.profiles.end() || seen(next.profile)) continue;
      ProfileTrace* trace = nullptr;
      if (options.trace) {
        r.profiles.push_back(ProfileTrace{next.profile, true, next.reason, {}, {}, {}, {}, {}});
        trace = &r.profiles.back();
      }
      ProfileRun run{std::move(next.profile), true, {}, {}, std::move(next.reason)};
      if (options.scores) run_scores.emplace_back();
      ctx.peer = next.peer;
      run.picked = RunProfile(*it, ctx, candidates, trace, run.error, options.scores ? &run_scores.back() : nullptr);
      ctx.peer = nullptr;
      if (trace) trace->error = run.error;
      runs.push_back(std::move(run));
    }
  }
  for (const ProfileRun& pr : runs) {
    ProfilePick pick{pr.profile, pr.ran, {}, pr.reason, pr.error};
    for (const Endpoint* e : pr.picked) pick.endpoints.push_back(e->address);
    r.profile_picks.push_back(std::move(pick));
  }
  // Usually `t` is the end of the PickProfiles call that returned no profile just before.
  if (!handler_done) t = TimingNowNs();
  absl::StatusOr<ProfilesOutcome> outcome = m.handler->ProcessResults(ctx, runs);
  m.process_results_timer->histogram.Record(TimingNowNs() - t);
  if (!outcome.ok()) {
    r.status = absl::IsInvalidArgument(outcome.status()) ? 400 : 503;
    r.reason = std::string(outcome.status().message());
    return r;
  }
  r.primary_profile = outcome->primary;
  r.profiles_reason = std::move(outcome->reason);
  const ProfileRun* primary = nullptr;
  for (const ProfileRun& pr : runs)
    if (pr.profile == r.primary_profile) primary = &pr;
  if (!primary || primary->picked.empty()) {
    std::vector<std::string> errors;
    for (const ProfileRun& pr : runs)
      if (pr.ran && !pr.error.empty()) errors.push_back(absl::StrCat(pr.profile, ": ", pr.error));
    r.status = 503;
    r.reason = absl::StrCat("no eligible endpoint: ", errors.empty() ? "profile produced no endpoint" : absl::StrJoin(errors, "; "));
    return r;
  }
  for (const Endpoint* e : primary->picked) {
    if (outcome->destination_port == 0) {
      r.endpoints.push_back(e->address);
      continue;
    }
    const size_t colon = e->address.rfind(':');
    r.endpoints.push_back(absl::StrCat(colon == std::string::npos ? e->address : e->address.substr(0, colon), ":",
                                       outcome->destination_port));
  }
  if (options.scores) r.primary_scores = std::move(run_scores[static_cast<size_t>(primary - runs.data())]);
  r.headers = std::move(outcome->headers);
  r.status = 200;
  r.reason = absl::StrCat("picked by profile '", r.primary_profile, "'");
  r.prefix_match_blocks = ctx.PrefixMatchBlocks(primary->picked.front());
  for (const ResponseHeaderSource* h : m.response_header_sources) h->ResponseHeaders(ctx, runs, r.primary_profile, r.response_headers);
  if (options.record) {
    // Observers learn every server the request reaches: the primary endpoint, and the first pick
    // of each other profile that ran (a disaggregated prefill server computes, and keeps, the
    // prompt's KV blocks too).
    std::vector<const Endpoint*> targets = {primary->picked.front()};
    for (const ProfileRun& pr : runs)
      if (&pr != primary && !pr.picked.empty() &&
          std::find(targets.begin(), targets.end(), pr.picked.front()) == targets.end())
        targets.push_back(pr.picked.front());
    // Process-wide, so that a rebuilt scheduler sharing plugin instances never reuses an id.
    static std::atomic<uint64_t> next_pick_id{0};
    r.pick_id = ctx.pick_id = next_pick_id.fetch_add(1, std::memory_order_relaxed) + 1;
    t = m.observers.empty() ? 0 : TimingNowNs();
    for (size_t i = 0; i < m.observers.size(); ++i) {
      for (const Endpoint* target : targets) m.observers[i]->PreRequest(ctx, *target);
      const int64_t t_end = TimingNowNs();
      m.observer_timers[i]->histogram.Record(t_end - t);
      t = t_end;
    }
    r.load_tokens = EstimateLoadTokens(request);
    m.load->Add(primary->picked.front()->address, 1, r.load_tokens);
    if (r.endpoints.front() != primary->picked.front()->address) r.load_endpoint = primary->picked.front()->address;
  }
  return r;
}

void Scheduler::Release(const PickResult& result) const {
  if (result.status != 200 || result.endpoints.empty() || result.load_tokens == 0) return;
  Release(result.load_endpoint.empty() ? result.endpoints.front() : result.load_endpoint, result.load_tokens);
}

void Scheduler::Release(std::string_view endpoint, int64_t tokens) const { impl_->load->Add(endpoint, -1, -tokens); }

void Scheduler::ObserveFirstToken(uint64_t pick_id, std::string_view endpoint, std::optional<int64_t> at_us) const {
  if (pick_id == 0 || impl_->first_token_observers.empty()) return;
  const int64_t at = at_us ? *at_us : impl_->clock->NowMicros();
  for (const FirstTokenObserver* o : impl_->first_token_observers) o->FirstToken(pick_id, endpoint, at);
}

void Scheduler::ForgetEndpoint(std::string_view endpoint) const {
  impl_->load->Forget(endpoint);
  for (const auto& p : impl_->plugins)
    if (auto* s = dynamic_cast<const plugins::EndpointState*>(p.get())) s->ForgetEndpoint(endpoint);
}

const std::vector<std::string>& Scheduler::warnings() const { return impl_->warnings; }

std::vector<std::string> Scheduler::ProfileNames() const { return impl_->profile_names; }

const std::vector<std::string>& Scheduler::OwnedHeaders() const { return impl_->owned_headers; }

size_t Scheduler::PrefixIndexEntries() const {
  size_t n = 0;
  for (const auto& p : impl_->plugins)
    if (auto* s = dynamic_cast<const plugins::EndpointState*>(p.get())) n += s->PrefixEntries();
  return n;
}

std::pair<int64_t, int64_t> Scheduler::Inflight(std::string_view endpoint) const { return impl_->load->Get(endpoint); }

void Scheduler::ConfigureScrape(ScrapeOptions& options) const {
  for (const auto& p : impl_->plugins)
    if (auto* s = dynamic_cast<const plugins::ScrapeSettingsSource*>(p.get())) s->ConfigureScrape(options);
}

const KvEventsBinding* Scheduler::KvEvents() const {
  for (const auto& p : impl_->plugins)
    if (auto* s = dynamic_cast<const plugins::KvEventsSource*>(p.get())) return &s->Binding();
  return nullptr;
}

namespace {

// The path suffixes llm-d's openai-parser claims (after the query and trailing slashes go).
bool OpenAIParserClaims(std::string_view path) {
  path = path.substr(0, path.find('?'));
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  for (std::string_view suffix : {"chat/completions", "completions", "embeddings", "responses", "conversations",
                                  "chat/completions/render", "completions/render", "images/generations"}) {
    if (path.size() >= suffix.size() && path.substr(path.size() - suffix.size()) == suffix) return true;
  }
  return false;
}

}  // namespace

std::vector<ResponseMetadataEntry> Scheduler::ResponseMetadata(const ResponseUsage& usage) const {
  std::vector<ResponseMetadataEntry> out;
  for (const ResponseMetadataSource* s : impl_->response_metadata_sources) s->ResponseMetadata(usage, out);
  return out;
}

bool Scheduler::WantsResponseMetadata() const { return !impl_->response_metadata_sources.empty(); }

bool Scheduler::RoutesUnparsed(std::string_view path) const {
  switch (impl_->passthrough) {
    case Impl::Passthrough::kNever: return false;
    case Impl::Passthrough::kAlways: return true;
    case Impl::Passthrough::kUnclaimed: return !OpenAIParserClaims(path);
  }
  return false;
}

std::vector<TokenizerCounters> Scheduler::Tokenizers() const {
  std::vector<TokenizerCounters> out;
  for (const auto& p : impl_->plugins)
    if (auto* s = dynamic_cast<const plugins::TokenSource*>(p.get())) out.push_back(s->Counters());
  return out;
}

namespace {

// The metric inputs an endpoint's EndpointMetrics carries (the others are epp's own state).
bool MetricInput(PluginInput i) {
  return i == PluginInput::kWaitingQueue || i == PluginInput::kRunningRequests || i == PluginInput::kKvCacheUsage ||
         i == PluginInput::kLora || i == PluginInput::kCacheGeometry;
}

bool Provides(const Endpoint& e, PluginInput i) {
  switch (i) {
    case PluginInput::kWaitingQueue: return e.metrics.waiting_queue_size.has_value();
    case PluginInput::kRunningRequests: return e.metrics.running_requests.has_value();
    case PluginInput::kKvCacheUsage: return e.metrics.kv_cache_usage.has_value();
    case PluginInput::kLora: return e.metrics.lora.has_value();
    case PluginInput::kCacheGeometry: return e.metrics.cache_block_size.has_value() && e.metrics.cache_num_blocks.has_value();
    default: return true;
  }
}

bool Maps(const MetricMapping& m, PluginInput i) {
  switch (i) {
    case PluginInput::kWaitingQueue: return !m.queue.empty();
    case PluginInput::kRunningRequests: return !m.running.empty();
    case PluginInput::kKvCacheUsage: return !m.kv_usage.empty();
    case PluginInput::kLora: return !m.lora.empty();
    case PluginInput::kCacheGeometry: return !m.cache_info.empty() || (!m.cache_block_size.empty() && !m.cache_num_blocks.empty());
    default: return true;
  }
}

}  // namespace

std::vector<MissingInput> Scheduler::MissingInputs(const MetricMapping& mapping) const {
  std::vector<MissingInput> out;
  for (const auto& p : impl_->plugins)
    for (PluginInput i : kAllPluginInputs)
      if (p->Consumes().has(i) && MetricInput(i) && !Maps(mapping, i))
        out.push_back({p->name(), p->type(), i,
                       absl::StrCat("engine ", mapping.engine, " has no metric for ", std::string(PluginInputName(i)))});
  return out;
}

std::vector<MissingInput> Scheduler::MissingInputs(std::span<const Endpoint> endpoints) const {
  std::vector<MissingInput> out;
  if (endpoints.empty()) return out;
  for (const auto& p : impl_->plugins) {
    for (PluginInput i : kAllPluginInputs) {
      // Labels are configuration, and a filter without them has its own rule (decode-filter keeps
      // endpoints without a role): only metrics are reported.
      if (!p->Consumes().has(i) || !MetricInput(i)) continue;
      if (std::any_of(endpoints.begin(), endpoints.end(), [&](const Endpoint& e) { return Provides(e, i); })) continue;
      const std::string what(PluginInputName(i));
      out.push_back({p->name(), p->type(), i,
                     endpoints.size() == 1 ? "the endpoint did not report " + what
                                           : absl::StrCat("none of the ", endpoints.size(), " endpoints reported ", what)});
    }
  }
  return out;
}

std::vector<PluginTiming> Scheduler::PluginTimings() const {
  std::vector<PluginTiming> out;
  out.reserve(impl_->timers.size());
  for (const auto& t : impl_->timers) {
    DurationHistogram h = t->histogram.Snapshot();
    out.push_back(PluginTiming{t->extension_point, t->plugin ? t->plugin->type() : std::string(),
                               t->plugin ? t->plugin->name() : std::string(), h.count, h.sum_seconds,
                               std::move(h.bucket_counts)});
  }
  return out;
}

DurationHistogram Scheduler::CycleTiming() const { return impl_->cycle_timing.Snapshot(); }

}  // namespace epp
