// The scheduling cycle (see scheduler.h for the order of steps and the outcome rules).
//
// Deliberate deviation from llm-d: when the primary profile's filters remove every candidate,
// llm-d answers 429 ("rejected-saturated") whatever the filter; epp answers 429 only when a filter
// that removes busy endpoints (Filter::RemovesBusyEndpoints) emptied the set, and 503
// ("rejected-no-endpoints") when the filters ruled every endpoint out for what it is (a label, a
// role): nothing was shed, and retrying later will not help (docs/scheduling.md).
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/strings.h"
#include "epp/kv/subscriber.h"
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
  if (load_.empty() && remote_.empty()) return;
  for (size_t i = 0; i < endpoints.size(); ++i) {
    if (auto it = load_.find(endpoints[i].address); it != load_.end()) {
      requests[i] = it->second.first;
      tokens[i] = it->second.second;
    }
    if (remote_.empty()) continue;
    if (auto it = remote_.find(endpoints[i].address); it != remote_.end()) {
      requests[i] += it->second.first;
      tokens[i] += it->second.second;
    }
  }
}

void LoadTracker::SetRemote(std::span<const RemoteLoad> remote) {
  absl::flat_hash_map<std::string, std::pair<int64_t, int64_t>> next;
  next.reserve(remote.size());
  for (const RemoteLoad& r : remote) {
    auto& v = next[r.endpoint];
    v.first += std::max<int64_t>(0, r.requests);
    v.second += std::max<int64_t>(0, r.tokens);
  }
  std::lock_guard<std::mutex> lock(mu_);
  remote_.swap(next);
}

std::pair<int64_t, int64_t> LoadTracker::GetRemote(std::string_view endpoint) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = remote_.find(absl::string_view(endpoint.data(), endpoint.size()));
  return it == remote_.end() ? std::pair<int64_t, int64_t>{0, 0} : it->second;
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
      static const std::map<std::string_view, std::string_view> kSpanPrefix = {
          {"Filter", "llm_d.epp.filter."}, {"Scorer", "llm_d.epp.scorer."},
          {"DataProducer", "llm_d.epp.producer."}, {"Admitter", "llm_d.epp.admitter."}};
      if (auto it = kSpanPrefix.find(extension_point); it != kSpanPrefix.end())
        t->span_name = std::string(it->second) + (plugin ? plugin->type() : std::string("unknown"));
    }
    return t;
  };
  // Producers and observers are kept as interfaces; find the plugin that implements each.
  auto owner = [&](auto as, const void* iface) -> const Plugin* {
    for (const auto& p : m.plugins)
      if (static_cast<const void*>(((*p).*as)()) == iface) return p.get();
    return nullptr;
  };
  for (const Screener* s : m.screeners) m.screener_timers.push_back(timer("Screener", owner(&Plugin::AsScreener, s)));
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
}

// The runtime capabilities, found once; RuntimeNeeds is their summary for the runtime.
void IndexRuntimeNeeds(Scheduler::Impl& m) {
  m.caps = plugins::IndexCapabilities(m.plugins);
  RuntimeNeeds& n = m.needs;
  n.kv_events = m.caps.kv_events ? &m.caps.kv_events->Binding() : nullptr;
  n.scrape_settings = !m.caps.scrape_settings.empty();
  n.first_token = !m.caps.first_token_observers.empty();
  n.completion = !m.caps.completion_observers.empty();
  n.response_metadata = !m.response_metadata_sources.empty();
  n.endpoint_state = m.caps.endpoint_states.size();
  n.tokenizers = m.caps.token_sources.size();
}

}  // namespace

Scheduler::Scheduler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  SetUpTimers(*impl_);
  IndexRuntimeNeeds(*impl_);
}
Scheduler::~Scheduler() = default;

int64_t Scheduler::EstimateLoadTokens(const InferenceRequest& request) {
  const int64_t input = std::max<int64_t>(1, request.prompt_tokens);
  return input + std::llround(1.5 * static_cast<double>(input));
}

namespace {

// The spans of a traced cycle (PickOptions::spans). Indices, not pointers: the vector grows.
struct SpanRecorder {
  std::vector<CycleSpan>* spans = nullptr;
  const InferenceRequest* request = nullptr;

  int Open(std::string_view name, int parent, int64_t start_ns, size_t attributes = 4) {
    CycleSpan& s = spans->emplace_back();
    s.name = name;
    s.parent = parent;
    s.start_ns = s.end_ns = start_ns;
    s.attributes.reserve(attributes);
    return static_cast<int>(spans->size()) - 1;
  }
  CycleSpan& at(int i) { return (*spans)[static_cast<size_t>(i)]; }
  template <class V>
  void Set(int i, std::string_view key, V value) {  // key: a literal
    at(i).attributes.emplace_back(key, SpanValue(std::move(value)));
  }
  // llm-d's request attributes on its filter, scoring and picker spans.
  void RequestAttributes(int i) {
    if (!request->model.empty()) Set(i, "gen_ai.request.model", request->model);
    for (const auto& [k, v] : request->headers)
      if (k == "x-request-id" && !v.empty()) Set(i, "gen_ai.request.id", v);
  }
};

// The best `k` of `values` (index order among ties), as (endpoints, scores) span attributes.
inline constexpr size_t kTracedEndpointScores = 5;  // llm-d's maxTracedEndpointScores
void SetTopScores(SpanRecorder& rec, int span, bool picker, const std::vector<const Endpoint*>& endpoints,
                  const double* values) {
  // One pass keeping the best k in order (k = 5: cheaper than sorting an index of every endpoint).
  std::array<size_t, kTracedEndpointScores> best{};
  size_t k = 0;
  for (size_t i = 0; i < endpoints.size(); ++i) {
    if (k == best.size() && !(values[i] > values[best[k - 1]])) continue;
    size_t at = k < best.size() ? k++ : k - 1;
    while (at > 0 && values[i] > values[best[at - 1]]) {
      best[at] = best[at - 1];
      --at;
    }
    best[at] = i;
  }
  std::vector<std::string> names;
  std::vector<double> scores;
  names.reserve(k);
  scores.reserve(k);
  for (size_t i = 0; i < k; ++i) {
    names.push_back(endpoints[best[i]]->address);
    scores.push_back(values[best[i]]);
  }
  rec.Set(span, picker ? "llm_d.epp.picker.top_endpoints" : "llm_d.epp.scorer.top_endpoints", std::move(names));
  rec.Set(span, picker ? "llm_d.epp.picker.top_scores" : "llm_d.epp.scorer.top_scores", std::move(scores));
}

// Runs one profile; returns the picked endpoints (empty with `error` set when filters removed all).
std::vector<const Endpoint*> RunProfile(const Profile& profile, const SchedulingContext& ctx,
                                        const std::vector<const Endpoint*>& candidates, ProfileTrace* trace,
                                        std::string& error, bool& saturated,
                                        std::vector<std::pair<std::string, double>>* scores_out = nullptr,
                                        SpanRecorder* rec = nullptr, int profile_span = -1) {
  std::vector<const Endpoint*> cur = candidates;
  // Timing: one clock read per call boundary; consecutive filters share theirs (only a vector move
  // lies between them), trace work is excluded by a fresh read.
  int64_t t = profile.filters.empty() && !rec ? 0 : TimingNowNs();
  int filters_span = -1;
  if (rec) {
    filters_span = rec->Open("filter_endpoints", profile_span, t);
    rec->Set(filters_span, "llm_d.epp.filter.candidate_endpoints", static_cast<int64_t>(cur.size()));
    rec->RequestAttributes(filters_span);
  }
  for (size_t fi = 0; fi < profile.filters.size(); ++fi) {
    const auto& [plugin, filter] = profile.filters[fi];
    std::vector<const Endpoint*> next = filter->Apply(ctx, cur);
    const int64_t t_end = TimingNowNs();
    profile.filter_timers[fi]->histogram.Record(t_end - t);
    if (rec) {
      // epp: one span per filter (llm-d has the chain's only), with what it removed.
      const int f = rec->Open(profile.filter_timers[fi]->span_name, filters_span, t, 5);
      rec->at(f).end_ns = t_end;
      rec->Set(f, "llm_d.epp.filter.type", plugin->type());
      rec->Set(f, "llm_d.epp.filter.name", plugin->name());
      rec->Set(f, "llm_d.epp.filter.candidate_endpoints", static_cast<int64_t>(cur.size()));
      rec->Set(f, "llm_d.epp.filter.kept_endpoints", static_cast<int64_t>(next.size()));
      std::vector<std::string> removed;
      size_t j = 0;
      for (const Endpoint* e : cur) {
        if (j < next.size() && next[j] == e) {
          ++j;
        } else if (removed.size() < 8) {
          removed.push_back(e->address);
        }
      }
      if (!removed.empty()) rec->Set(f, "llm_d.epp.filter.removed_endpoints", std::move(removed));
    }
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
    }
    if (trace || rec) t = TimingNowNs();
    cur = std::move(next);
    if (cur.empty()) {
      error = absl::StrCat("filter '", plugin->name(), "' removed every remaining endpoint");
      saturated = filter->RemovesBusyEndpoints();
      if (rec) {
        rec->at(filters_span).end_ns = t;
        rec->Set(filters_span, "llm_d.epp.filter.filtered_endpoints", int64_t{0});
      }
      return {};
    }
  }
  if (rec) {
    rec->at(filters_span).end_ns = t;
    rec->Set(filters_span, "llm_d.epp.filter.filtered_endpoints", static_cast<int64_t>(cur.size()));
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
  int scoring_span = -1;
  if (rec) {
    scoring_span = rec->Open("llm_d.epp.scoring", profile_span, TimingNowNs());
    rec->Set(scoring_span, "llm_d.epp.scorer.count", static_cast<int64_t>(num_scorers));
    rec->Set(scoring_span, "llm_d.epp.scoring.candidate_endpoints", static_cast<int64_t>(n));
    rec->RequestAttributes(scoring_span);
  }
  if (num_scorers > 0) {
    t = TimingNowNs();
    for (size_t si = 0; si < num_scorers; ++si) {
      profile.scorers[si].scorer->Score(ctx, cur, std::span<double>(raw_all).subspan(si * n, n));
      const int64_t t_end = TimingNowNs();
      profile.scorer_timers[si]->histogram.Record(t_end - t);
      if (rec) {
        // llm-d's per-scorer span and attributes; the best few endpoints are epp's (llm-d keeps
        // per-endpoint values off scorer spans; five are bounded).
        const WeightedScorer& ws = profile.scorers[si];
        const int sp = rec->Open(profile.scorer_timers[si]->span_name, scoring_span, t, 10);
        rec->at(sp).end_ns = t_end;
        rec->Set(sp, "llm_d.epp.scorer.type", ws.plugin->type());
        rec->Set(sp, "llm_d.epp.scorer.name", ws.plugin->name());
        rec->Set(sp, "llm_d.epp.scorer.weight", ws.weight);
        rec->Set(sp, "llm_d.epp.scorer.candidate_endpoints", static_cast<int64_t>(n));
        if (n > 0) {
          const double* raw = raw_all.data() + si * n;
          double max = raw[0], sum = 0;
          for (size_t i = 0; i < n; ++i) {
            max = std::max(max, raw[i]);
            sum += raw[i];
          }
          rec->Set(sp, "llm_d.epp.scorer.score.max", max);
          rec->Set(sp, "llm_d.epp.scorer.score.avg", sum / static_cast<double>(n));
          rec->Set(sp, "llm_d.epp.scorer.endpoints_scored", static_cast<int64_t>(n));
          SetTopScores(*rec, sp, false, cur, raw);
        }
      }
      t = t_end;
    }
  }
  if (rec) rec->at(scoring_span).end_ns = num_scorers > 0 ? t : rec->at(scoring_span).start_ns;
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
  int pick_span = -1;
  if (rec) {
    pick_span = rec->Open("pick_endpoints", profile_span, 0);
    rec->Set(pick_span, "llm_d.epp.picker.candidate_endpoints", static_cast<int64_t>(n));
    if (n > 0) SetTopScores(*rec, pick_span, true, cur, total.data());
    rec->RequestAttributes(pick_span);
  }
  const int64_t t_pick = TimingNowNs();
  std::vector<const Endpoint*> picked = profile.picker->Pick(ctx, scored);
  const int64_t t_picked = TimingNowNs();
  profile.picker_timer->histogram.Record(t_picked - t_pick);
  if (rec) {
    rec->at(pick_span).start_ns = t_pick;
    rec->at(pick_span).end_ns = t_picked;
    rec->Set(pick_span, "llm_d.epp.picker.type", profile.picker_plugin->type());
    std::vector<std::string> names;
    for (const Endpoint* e : picked) names.push_back(e->address);
    rec->Set(pick_span, "llm_d.epp.picker.picked_endpoints", std::move(names));
  }
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

namespace {

// One scheduling cycle, step by step (scheduler.h lists the steps and their outcome rules). Each
// step that can end the cycle returns false with `r` holding the answer. Plugin timings share
// clock reads across adjacent calls: `t` is the last reading, carried from one step to the next
// where only the scheduler's bookkeeping lies between two plugin calls.
class Cycle {
 public:
  // Writes the answer into `result` (the caller's return value: no copy or move at the end).
  Cycle(const Scheduler::Impl& m, const InferenceRequest& request, std::span<const Endpoint> endpoints,
        const PickOptions& options, PickResult& result)
      : m_(m), request_(request), endpoints_(endpoints), options_(options), r_(result) {
    ctx_.request = &request;
    ctx_.endpoints = endpoints;
    ctx_.rng = m.rng;
    ctx_.now_us = m.clock->NowMicros();
    // 0. Request-header processors publish their attributes; the fairness id follows llm-d's
    //    Director rule (a header's id, else the agent identity), whatever the cycle's outcome.
    for (const RequestHeaderProcessor* h : m.header_processors) h->RequestHeader(request, ctx_.attributes);
    r_.fairness_id = request.fairness_id;
    if (const std::string* agent = ctx_.attributes.Find(kAgentIdentityAttribute); agent && r_.fairness_id.empty())
      r_.fairness_id = *agent;
    if (options.spans) {
      rec_.spans = options.spans;
      rec_.spans->reserve(rec_.spans->size() + 8 + 4 * m.timers.size());
      rec_.request = &request;
      cycle_span_ = rec_.Open("llm_d.epp.scheduling", -1, TimingNowNs());
      rec_.RequestAttributes(cycle_span_);
    }
  }
  // The cycle's span ends with the answer: status, reason, the endpoints.
  ~Cycle() {
    if (cycle_span_ < 0) return;
    CycleSpan& s = rec_.at(cycle_span_);
    s.end_ns = TimingNowNs();
    rec_.Set(cycle_span_, "llm_d.epp.scheduling.status", static_cast<int64_t>(r_.status));
    rec_.Set(cycle_span_, "llm_d.epp.scheduling.candidate_endpoints", static_cast<int64_t>(r_.candidates));
    if (!r_.primary_profile.empty()) rec_.Set(cycle_span_, "llm_d.epp.scheduling.primary_profile", r_.primary_profile);
    if (!r_.endpoints.empty()) rec_.Set(cycle_span_, "llm_d.epp.scheduling.endpoints", r_.endpoints);
    if (r_.status != 200) {
      rec_.Set(cycle_span_, "llm_d.epp.scheduling.reason", r_.reason);
      if (!r_.dropped_reason.empty()) rec_.Set(cycle_span_, "llm_d.epp.dropped_reason", r_.dropped_reason);
      // 5xx is an error of the picker; 4xx (shed, bad request) is the request's outcome.
      if (r_.status >= 500) {
        rec_.at(cycle_span_).error = true;
        rec_.at(cycle_span_).status_message = r_.reason;
      }
    }
  }

  // 1. The endpoints the gateway's subset hint allows, less those whose scrape was refused
  //    (unless that leaves none); none left: 503.
  bool SelectCandidates();
  // 1b. Screeners narrow the candidates for the whole cycle (their intersection); none left: 503.
  bool Screen();
  // 2. Data producers (tokens, prefix hashes and index lookups) fill the context.
  void RunProducers();
  // 3. Admission: the saturation detector sheds a sheddable request from a saturated pool, then
  //    each admitter may refuse the request (429).
  bool Admit();
  // 4. The profile handler names profiles to run or skip until it returns an empty step; each
  //    profile runs its filters, weighted scorers and picker.
  void RunProfiles();
  // 5. The handler's verdict: the primary profile; its failure (or the handler's error) ends the
  //    cycle with 503 (400 when the handler blames the request).
  bool ProcessResults();
  // 6. The answer: the primary profile's endpoints (at the handler's destination port), upstream
  //    and response headers.
  void Answer();
  // 7. A recorded pick: request observers learn every server the request reaches, and the
  //    request's load estimate is added to the primary endpoint until Release().
  void Record();

 private:
  const Scheduler::Impl& m_;
  const InferenceRequest& request_;
  std::span<const Endpoint> endpoints_;
  const PickOptions& options_;
  PickResult& r_;
  SchedulingContext ctx_;
  int64_t t_ = 0;  // the last timing clock read
  std::vector<const Endpoint*> candidates_;
  std::vector<ProfileRun> runs_;
  // With options.scores: every scored candidate per run (aligned with runs_; empty for skips).
  std::vector<std::vector<std::pair<std::string, double>>> run_scores_;
  bool handler_done_ = false;  // the last PickProfiles returned an empty step
  ProfilesOutcome outcome_;
  const ProfileRun* primary_ = nullptr;
  SpanRecorder rec_;  // rec_.spans set: a traced request
  int cycle_span_ = -1;

  void RunOne(ProfileStep::Entry next);
  void SkipOne(ProfileStep::Entry skip);
  bool Seen(const std::string& profile) const {
    return std::any_of(runs_.begin(), runs_.end(), [&](const ProfileRun& pr) { return pr.profile == profile; });
  }
};

bool Cycle::SelectCandidates() {
  candidates_.reserve(endpoints_.size());
  for (const Endpoint& e : endpoints_) {
    if (options_.subset) {
      bool in = false;
      for (const std::string& s : *options_.subset) in = in || SubsetEntryMatches(s, e.address);
      if (!in) continue;
    }
    candidates_.push_back(&e);
  }
  // A server whose scrape was refused is gone; pass it over unless nothing else is left (then
  // the pick goes on over all of them, as without the signal).
  const size_t reachable = static_cast<size_t>(
      std::count_if(candidates_.begin(), candidates_.end(), [](const Endpoint* e) { return !e->unreachable; }));
  if (reachable > 0 && reachable < candidates_.size()) {
    size_t kept = 0;
    for (const Endpoint* e : candidates_) {
      if (e->unreachable) r_.unreachable.push_back(e->address);
      else candidates_[kept++] = e;
    }
    candidates_.resize(kept);
  }
  r_.candidates = static_cast<int>(candidates_.size());
  if (!candidates_.empty()) return true;
  r_.status = 503;
  r_.dropped_reason = kDroppedNoEndpoints;
  if (!options_.subset)
    r_.reason = "no endpoints in the pool";
  else if (options_.subset->empty())
    r_.reason = "the subset hint is empty: no endpoint may serve the request";
  else
    r_.reason = absl::StrCat("no endpoint of the pool matches the subset hint [", absl::StrJoin(*options_.subset, ", "), "]");
  return false;
}

bool Cycle::Screen() {
  if (m_.screeners.empty()) return true;
  // Every screener sees the same candidates (llm-d's rule: one screener's random choice must not
  // depend on another's); an endpoint stays when all of them keep it.
  std::vector<int> kept_by(candidates_.size(), 0);
  const std::string* emptied = nullptr;
  for (size_t i = 0; i < m_.screeners.size(); ++i) {
    const int64_t t0 = TimingNowNs();
    const std::vector<const Endpoint*> kept = m_.screeners[i]->Screen(ctx_, candidates_);
    m_.screener_timers[i]->histogram.Record(TimingNowNs() - t0);
    size_t j = 0;
    for (size_t c = 0; c < candidates_.size() && j < kept.size(); ++c)
      if (candidates_[c] == kept[j]) ++kept_by[c], ++j;
    if (kept.empty() && emptied == nullptr) emptied = &m_.screener_timers[i]->plugin->name();
  }
  size_t n = 0;
  for (size_t c = 0; c < candidates_.size(); ++c)
    if (kept_by[c] == static_cast<int>(m_.screeners.size())) candidates_[n++] = candidates_[c];
  candidates_.resize(n);
  r_.candidates = static_cast<int>(n);
  if (n > 0) return true;
  r_.status = 503;
  r_.dropped_reason = kDroppedNoEndpoints;
  r_.reason = emptied ? absl::StrCat("screeners eliminated all endpoint candidates (screener '", *emptied, "' kept none)")
                      : std::string("screeners eliminated all endpoint candidates");
  return false;
}

void Cycle::RunProducers() {
  m_.load->Snapshot(endpoints_, ctx_.inflight_requests, ctx_.inflight_tokens);
  // Producers and the detector run back to back and share their boundary clock reads.
  t_ = TimingNowNs();
  for (size_t i = 0; i < m_.producers.size(); ++i) {
    m_.producers[i]->Prepare(ctx_, candidates_);
    const int64_t t_end = TimingNowNs();
    m_.producer_timers[i]->histogram.Record(t_end - t_);
    if (cycle_span_ >= 0) {
      const Plugin* p = m_.producer_timers[i]->plugin;
      const int sp = rec_.Open(m_.producer_timers[i]->span_name, cycle_span_, t_, 1);
      rec_.at(sp).end_ns = t_end;
      if (p) rec_.Set(sp, "llm_d.epp.plugin.name", p->name());
      t_ = TimingNowNs();
    } else {
      t_ = t_end;
    }
  }
  r_.prefix_block_size_tokens = ctx_.prefix.block_size_tokens;
  r_.prefix_blocks = static_cast<int>(ctx_.prefix.hashes.size());
  if (ctx_.tokens.computed) {
    r_.tokens = static_cast<int64_t>(ctx_.tokens.ids.size());
    r_.tokens_source = ctx_.tokens.source;
    r_.tokens_note = ctx_.tokens.note;
  }
}

bool Cycle::Admit() {
  if (m_.detector) {
    r_.saturation = m_.detector->Saturation(ctx_, candidates_);
    if (options_.trace || request_.priority < 0) r_.saturation_detail = m_.detector->ExplainSaturation(ctx_, candidates_);
    const int64_t t_end = TimingNowNs();
    m_.detector_timer->histogram.Record(t_end - t_);
    if (cycle_span_ >= 0) {
      const int sp = rec_.Open("llm_d.epp.saturation_detector", cycle_span_, t_);
      rec_.at(sp).end_ns = t_end;
      rec_.Set(sp, "llm_d.epp.saturation", r_.saturation);
      rec_.Set(sp, "llm_d.epp.request.priority", static_cast<int64_t>(request_.priority));
    }
    if (request_.priority < 0 && r_.saturation >= 1.0) {
      r_.status = 429;
      r_.dropped_reason = kDroppedSaturated;
      r_.reason = absl::StrCat("system saturated, sheddable request dropped (priority ", request_.priority,
                               ", saturation ", Num(r_.saturation), " >= 1)");
      return false;
    }
  }
  for (size_t i = 0; i < m_.admitters.size(); ++i) {
    std::string why;
    const int64_t t0 = TimingNowNs();
    const bool admitted = m_.admitters[i]->Admit(ctx_, candidates_, why);
    const int64_t t_end = TimingNowNs();
    m_.admitter_timers[i]->histogram.Record(t_end - t0);
    if (cycle_span_ >= 0) {
      const Plugin* p = m_.admitter_timers[i]->plugin;
      const int sp = rec_.Open(m_.admitter_timers[i]->span_name, cycle_span_, t0, 3);
      rec_.at(sp).end_ns = t_end;
      if (p) rec_.Set(sp, "llm_d.epp.plugin.name", p->name());
      rec_.Set(sp, "llm_d.epp.admitter.admitted", admitted);
      if (!admitted) rec_.Set(sp, "llm_d.epp.admitter.reason", why);
    }
    if (!admitted) {
      // llm-d answers an admission plugin's refusal 500; epp's admitters shed load (429).
      r_.status = 429;
      r_.dropped_reason = kDroppedSaturated;
      r_.reason = why;
      return false;
    }
  }
  return true;
}

void Cycle::SkipOne(ProfileStep::Entry skip) {
  if (Seen(skip.profile)) return;
  if (options_.trace) r_.profiles.push_back(ProfileTrace{skip.profile, false, skip.reason, {}, {}, {}, {}, {}});
  runs_.push_back(ProfileRun{std::move(skip.profile), false, {}, {}, std::move(skip.reason)});
  if (options_.scores) run_scores_.emplace_back();
}

void Cycle::RunOne(ProfileStep::Entry next) {
  auto it = std::find_if(m_.profiles.begin(), m_.profiles.end(), [&](const Profile& p) { return p.name == next.profile; });
  if (it == m_.profiles.end() || Seen(next.profile)) return;
  ProfileTrace* trace = nullptr;
  if (options_.trace) {
    r_.profiles.push_back(ProfileTrace{next.profile, true, next.reason, {}, {}, {}, {}, {}});
    trace = &r_.profiles.back();
  }
  ProfileRun run{std::move(next.profile), true, {}, {}, std::move(next.reason)};
  if (options_.scores) run_scores_.emplace_back();
  ctx_.peer = next.peer;
  int profile_span = -1;
  if (cycle_span_ >= 0) {
    profile_span = rec_.Open("run_scheduler_profile", cycle_span_, TimingNowNs());
    rec_.Set(profile_span, "llm_d.epp.scheduling.profile.name", run.profile);
  }
  run.picked = RunProfile(*it, ctx_, candidates_, trace, run.error, run.saturated, options_.scores ? &run_scores_.back() : nullptr,
                          cycle_span_ >= 0 ? &rec_ : nullptr, profile_span);
  if (profile_span >= 0) {
    rec_.at(profile_span).end_ns = TimingNowNs();
    if (!run.error.empty()) rec_.Set(profile_span, "llm_d.epp.scheduling.profile.error", run.error);
  }
  ctx_.peer = nullptr;
  if (trace) trace->error = run.error;
  runs_.push_back(std::move(run));
}

void Cycle::RunProfiles() {
  runs_.reserve(m_.profiles.size());
  for (int round = 0; round < 16; ++round) {  // bounded: a handler cannot loop forever
    const int64_t t0 = TimingNowNs();
    ProfileStep step = m_.handler->PickProfiles(ctx_, m_.profile_names, runs_);
    t_ = TimingNowNs();
    m_.profile_picker_timer->histogram.Record(t_ - t0);
    handler_done_ = step.empty();
    if (handler_done_) break;
    for (ProfileStep::Entry& skip : step.skip) SkipOne(std::move(skip));
    for (ProfileStep::Entry& next : step.run) RunOne(std::move(next));
  }
  for (const ProfileRun& pr : runs_) {
    ProfilePick pick{pr.profile, pr.ran, {}, pr.reason, pr.error};
    for (const Endpoint* e : pr.picked) pick.endpoints.push_back(e->address);
    r_.profile_picks.push_back(std::move(pick));
  }
}

bool Cycle::ProcessResults() {
  // Usually t_ is the end of the PickProfiles call that returned no profile just before.
  if (!handler_done_) t_ = TimingNowNs();
  absl::StatusOr<ProfilesOutcome> outcome = m_.handler->ProcessResults(ctx_, runs_);
  m_.process_results_timer->histogram.Record(TimingNowNs() - t_);
  if (!outcome.ok()) {
    r_.status = absl::IsInvalidArgument(outcome.status()) ? 400 : 503;
    if (r_.status == 503) r_.dropped_reason = kDroppedNoEndpoints;
    r_.reason = std::string(outcome.status().message());
    return false;
  }
  outcome_ = *std::move(outcome);
  r_.primary_profile = outcome_.primary;
  r_.profiles_reason = std::move(outcome_.reason);
  for (const ProfileRun& pr : runs_)
    if (pr.profile == r_.primary_profile) primary_ = &pr;
  if (primary_ && !primary_->picked.empty()) return true;
  std::vector<std::string> errors;
  for (const ProfileRun& pr : runs_)
    if (pr.ran && !pr.error.empty()) errors.push_back(absl::StrCat(pr.profile, ": ", pr.error));
  // The primary profile picked nothing. Busy endpoints (a load filter removed the last one) are
  // a saturated pool: 429, as llm-d answers; endpoints ruled out for what they are: 503.
  const bool saturated = primary_ != nullptr && primary_->ran && primary_->saturated;
  r_.status = saturated ? 429 : 503;
  r_.dropped_reason = saturated ? kDroppedSaturated : kDroppedNoEndpoints;
  r_.reason = absl::StrCat(saturated ? "saturated: " : "no eligible endpoint: ",
                           errors.empty() ? "profile produced no endpoint" : absl::StrJoin(errors, "; "));
  return false;
}

void Cycle::Answer() {
  for (const Endpoint* e : primary_->picked) {
    if (outcome_.destination_port == 0) {
      r_.endpoints.push_back(e->address);
      continue;
    }
    const size_t colon = e->address.rfind(':');
    r_.endpoints.push_back(absl::StrCat(colon == std::string::npos ? e->address : e->address.substr(0, colon), ":",
                                        outcome_.destination_port));
  }
  if (options_.scores) r_.primary_scores = std::move(run_scores_[static_cast<size_t>(primary_ - runs_.data())]);
  r_.headers = std::move(outcome_.headers);
  r_.status = 200;
  r_.reason = absl::StrCat("picked by profile '", r_.primary_profile, "'");
  r_.prefix_match_blocks = ctx_.PrefixMatchBlocks(primary_->picked.front());
  if (ctx_.latency.computed) {
    r_.slo_ttft_ms = ctx_.latency.ttft_slo_ms;
    r_.slo_tpot_ms = ctx_.latency.tpot_slo_ms;
    if (const LatencyInfo* li = ctx_.Latency(primary_->picked.front())) {
      r_.predicted_ttft_ms = li->ttft_ms;
      r_.predicted_tpot_ms = li->tpot_ms;
    }
  }
  for (const ResponseHeaderSource* h : m_.response_header_sources)
    h->ResponseHeaders(ctx_, runs_, r_.primary_profile, r_.response_headers);
  for (const RequestHeaderSource* h : m_.request_header_sources)
    h->RequestHeaders(ctx_, runs_, r_.primary_profile, r_.headers);
}

void Cycle::Record() {
  // Observers learn every server the request reaches: the primary endpoint, and the first pick
  // of each other profile that ran (a disaggregated prefill server computes, and keeps, the
  // prompt's KV blocks too).
  std::vector<const Endpoint*> targets = {primary_->picked.front()};
  for (const ProfileRun& pr : runs_)
    if (&pr != primary_ && !pr.picked.empty() &&
        std::find(targets.begin(), targets.end(), pr.picked.front()) == targets.end())
      targets.push_back(pr.picked.front());
  // Process-wide, so that a rebuilt scheduler sharing plugin instances never reuses an id.
  static std::atomic<uint64_t> next_pick_id{0};
  r_.pick_id = ctx_.pick_id = next_pick_id.fetch_add(1, std::memory_order_relaxed) + 1;
  t_ = m_.observers.empty() ? 0 : TimingNowNs();
  for (size_t i = 0; i < m_.observers.size(); ++i) {
    for (const Endpoint* target : targets) m_.observers[i]->PreRequest(ctx_, *target);
    const int64_t t_end = TimingNowNs();
    m_.observer_timers[i]->histogram.Record(t_end - t_);
    t_ = t_end;
  }
  r_.load_tokens = Scheduler::EstimateLoadTokens(request_);
  m_.load->Add(primary_->picked.front()->address, 1, r_.load_tokens);
  if (r_.endpoints.front() != primary_->picked.front()->address) r_.load_endpoint = primary_->picked.front()->address;
}

}  // namespace

void Scheduler::PrepareRequest(InferenceRequest& request) const {
  if (!request.fairness_id.empty() || impl_->header_processors.empty()) return;
  RequestAttributes attributes;
  for (const RequestHeaderProcessor* h : impl_->header_processors) h->RequestHeader(request, attributes);
  if (const std::string* agent = attributes.Find(kAgentIdentityAttribute)) request.fairness_id = *agent;
}

PickResult Scheduler::Pick(const InferenceRequest& request, std::span<const Endpoint> endpoints,
                           const PickOptions& options) const {
  ScopedTiming cycle_timing(impl_->cycle_timing);
  PickResult r;
  {
    // Scoped: the cycle's span (a traced request) closes on `r` before it is returned.
    Cycle cycle(*impl_, request, endpoints, options, r);
    [&] {
      if (!cycle.SelectCandidates()) return;
      if (!cycle.Screen()) return;
      cycle.RunProducers();
      if (!cycle.Admit()) return;
      cycle.RunProfiles();
      if (!cycle.ProcessResults()) return;
      cycle.Answer();
      if (options.record) cycle.Record();
    }();
  }
  return r;
}

void Scheduler::Release(const PickResult& result) const {
  if (result.status != 200 || result.endpoints.empty() || result.load_tokens == 0) return;
  Release(result.load_endpoint.empty() ? result.endpoints.front() : result.load_endpoint, result.load_tokens);
}

void Scheduler::Release(std::string_view endpoint, int64_t tokens) const { impl_->load->Add(endpoint, -1, -tokens); }

void Scheduler::ObserveFirstToken(uint64_t pick_id, std::string_view endpoint, std::optional<int64_t> at_us) const {
  const std::vector<const FirstTokenObserver*>& observers = impl_->caps.first_token_observers;
  if (pick_id == 0 || observers.empty()) return;
  const int64_t at = at_us ? *at_us : impl_->clock->NowMicros();
  for (const FirstTokenObserver* o : observers) o->FirstToken(pick_id, endpoint, at);
}

void Scheduler::ObserveCompletion(uint64_t pick_id, std::string_view endpoint, ResponseCompletion completion) const {
  const std::vector<const CompletionObserver*>& observers = impl_->caps.completion_observers;
  if (pick_id == 0 || observers.empty()) return;
  if (completion.at_us == 0) completion.at_us = impl_->clock->NowMicros();
  for (const CompletionObserver* o : observers) o->Completed(pick_id, endpoint, completion);
}

void Scheduler::ForgetEndpoint(std::string_view endpoint) const {
  impl_->load->Forget(endpoint);
  for (const plugins::EndpointState* s : impl_->caps.endpoint_states) s->ForgetEndpoint(endpoint);
}

const RuntimeNeeds& Scheduler::Needs() const { return impl_->needs; }

const std::vector<std::string>& Scheduler::warnings() const { return impl_->warnings; }

std::vector<std::string> Scheduler::ProfileNames() const { return impl_->profile_names; }

const std::vector<std::string>& Scheduler::OwnedHeaders() const { return impl_->owned_headers; }

size_t Scheduler::PrefixIndexEntries() const {
  size_t n = 0;
  for (const plugins::EndpointState* s : impl_->caps.endpoint_states) n += s->PrefixEntries();
  return n;
}

std::pair<int64_t, int64_t> Scheduler::Inflight(std::string_view endpoint) const { return impl_->load->Get(endpoint); }

void Scheduler::SetRemoteLoad(std::span<const RemoteLoad> remote) const { impl_->load->SetRemote(remote); }

std::pair<int64_t, int64_t> Scheduler::RemoteInflight(std::string_view endpoint) const {
  return impl_->load->GetRemote(endpoint);
}

void Scheduler::ConfigureScrape(ScrapeOptions& options) const {
  for (const plugins::ScrapeSettingsSource* s : impl_->caps.scrape_settings) s->ConfigureScrape(options);
}

const KvEventsBinding* Scheduler::KvEvents() const { return impl_->needs.kv_events; }

namespace {

}  // namespace

std::vector<ResponseMetadataEntry> Scheduler::ResponseMetadata(const ResponseUsage& usage) const {
  std::vector<ResponseMetadataEntry> out;
  for (const ResponseMetadataSource* s : impl_->response_metadata_sources) s->ResponseMetadata(usage, out);
  return out;
}

bool Scheduler::WantsResponseMetadata() const { return !impl_->response_metadata_sources.empty(); }

bool Scheduler::RoutesUnparsed(std::string_view path) const {
  return impl_->parsers.Resolve(path) == RequestParser::kPassthrough;
}

const ParserSet& Scheduler::Parsers() const { return impl_->parsers; }

std::vector<TokenizerCounters> Scheduler::Tokenizers() const {
  std::vector<TokenizerCounters> out;
  for (const plugins::TokenSource* s : impl_->caps.token_sources) out.push_back(s->Counters());
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

std::vector<PluginMetric> Scheduler::PluginMetrics() const {
  std::vector<PluginMetric> out;
  for (const auto& p : impl_->plugins)
    if (const MetricsSource* m = p->AsMetricsSource()) m->CollectMetrics(out);
  return out;
}

}  // namespace epp
