// Replay workloads: prompt rendering from segments, inference-perf's shared_prefix generator, the
// GIE prefix-cache benchmark configurations, Mooncake and captured-OpenAI trace loaders, and
// the named baseline policies.
#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/json.h"
#include "epp/prefix_cache.h"
#include "epp/tools/replay.h"
#include "epp/request.h"
#include "flowcontrol/policies.h"
#include "replay/render.h"
#include "common/os_error.h"

namespace epp {
namespace {

uint64_t SplitMix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Segment ids by purpose, so system prompts, questions and answers never collide.
constexpr uint64_t kSystemBase = uint64_t{1} << 60;
constexpr uint64_t kQuestionBase = uint64_t{2} << 60;
constexpr uint64_t kAnswerBase = uint64_t{3} << 60;
constexpr uint64_t kMooncakeBase = uint64_t{4} << 60;

absl::Status Bad(std::string_view what) { return absl::InvalidArgumentError(std::string(what)); }

}  // namespace

namespace replay_internal {

void RenderSegment(uint64_t id, size_t chars, char* out) {
  // 36 word-ish symbols, indexed by a byte of SplitMix output modulo 36 (tabulated).
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz  eeaattoo";
  static const auto* kTable = [] {
    auto* t = new std::array<char, 256>;
    for (int b = 0; b < 256; ++b) (*t)[static_cast<size_t>(b)] = kAlphabet[b % 36];
    return t;
  }();
  uint64_t state = id * 0x2545f4914f6cdd1dULL + 0x1234567;
  while (chars >= 8) {
    uint64_t x = SplitMix(state);
    for (int k = 0; k < 8; ++k, x >>= 8) *out++ = (*kTable)[x & 0xff];
    chars -= 8;
  }
  if (chars > 0) {
    uint64_t x = SplitMix(state);
    for (; chars > 0; --chars, x >>= 8) *out++ = (*kTable)[x & 0xff];
  }
}

std::string_view PromptRenderer::Render(const ReplayRequest& r) {
  if (!r.text.empty()) return r.text;
  size_t total = 0;
  for (const ReplaySegment& s : r.segments) total += static_cast<size_t>(std::max(0, s.tokens)) * kCharsPerToken;
  buf_.resize(total);
  char* p = buf_.data();
  for (const ReplaySegment& s : r.segments) {
    const size_t n = static_cast<size_t>(std::max(0, s.tokens)) * kCharsPerToken;
    if (n == 0) continue;
    std::string& seg = segments_[s.id];
    if (seg.size() < n) {
      if (cached_bytes_ + n - seg.size() > kMaxCachedBytes) {
        segments_.clear();
        cached_bytes_ = 0;
        RenderSegment(s.id, n, p);
        p += n;
        continue;
      }
      cached_bytes_ += n - seg.size();
      seg.resize(n);
      RenderSegment(s.id, n, seg.data());
    }
    std::memcpy(p, seg.data(), n);
    p += n;
  }
  return buf_;
}

}  // namespace replay_internal

std::string RenderReplayPrompt(const ReplayRequest& r) {
  if (!r.text.empty()) return r.text;
  size_t chars = 0;
  for (const ReplaySegment& s : r.segments) chars += static_cast<size_t>(std::max(0, s.tokens)) * kCharsPerToken;
  std::string out;
  out.resize(chars);
  char* p = out.data();
  for (const ReplaySegment& s : r.segments) {
    const size_t n = static_cast<size_t>(std::max(0, s.tokens)) * kCharsPerToken;
    replay_internal::RenderSegment(s.id, n, p);
    p += n;
  }
  return out;
}

absl::StatusOr<std::vector<ReplayRequest>> GenerateSharedPrefix(const SharedPrefixWorkload& w) {
  if (w.groups <= 0) return Bad("shared-prefix: groups must be > 0");
  if (w.prompts_per_group <= 0) return Bad("shared-prefix: prompts-per-group must be > 0");
  if (w.system_len < 0 || w.question_len <= 0 || w.output_len <= 0)
    return Bad("shared-prefix: system-len must be >= 0, question-len and output-len > 0");
  if (!(w.rate > 0)) return Bad("shared-prefix: rate must be > 0");
  if (w.duration_s < 0) return Bad("shared-prefix: duration must be >= 0");
  const int64_t pairs = static_cast<int64_t>(w.groups) * w.prompts_per_group;
  const int64_t count = w.duration_s > 0 ? std::max<int64_t>(1, std::llround(w.rate * w.duration_s)) : pairs;
  if (count > 50'000'000) return Bad("shared-prefix: more than 50 million requests");
  std::mt19937_64 rng(w.seed);
  std::exponential_distribution<double> gap(w.rate);
  std::vector<ReplayRequest> out;
  out.reserve(static_cast<size_t>(count));
  // Single turn: each pass visits every (group, prompt) pair once in a random order. Multi-turn:
  // groups take turns at random, each advancing its own conversation (wrapping to a new
  // conversation after prompts_per_group turns).
  std::vector<int64_t> order(static_cast<size_t>(pairs));
  std::vector<int> turn(static_cast<size_t>(w.groups), 0), conversation(static_cast<size_t>(w.groups), 0);
  double t = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (!w.multi_turn && i % pairs == 0) {
      for (int64_t k = 0; k < pairs; ++k) order[static_cast<size_t>(k)] = k;
      std::shuffle(order.begin(), order.end(), rng);
    }
    ReplayRequest r;
    r.model = w.model;
    r.arrival_us = std::llround(t * 1e6);
    t += w.poisson ? gap(rng) : 1.0 / w.rate;
    int g = 0, q = 0;
    uint64_t conv = 0;
    if (w.multi_turn) {
      g = static_cast<int>(rng() % static_cast<uint64_t>(w.groups));
      q = turn[static_cast<size_t>(g)];
      conv = static_cast<uint64_t>(conversation[static_cast<size_t>(g)]);  // before a wrap starts the next one
      if (++turn[static_cast<size_t>(g)] == w.prompts_per_group) {
        turn[static_cast<size_t>(g)] = 0;
        conversation[static_cast<size_t>(g)]++;
      }
    } else {
      const int64_t pair = order[static_cast<size_t>(i % pairs)];
      g = static_cast<int>(pair / w.prompts_per_group);
      q = static_cast<int>(pair % w.prompts_per_group);
    }
    r.segments.reserve(w.multi_turn ? static_cast<size_t>(2 * q + 2) : 2);
    if (w.system_len > 0)
      r.segments.push_back({kSystemBase + (w.shared_system_prompt ? 0 : static_cast<uint64_t>(g)), static_cast<int32_t>(w.system_len)});
    const uint64_t key = (conv * static_cast<uint64_t>(w.groups) + static_cast<uint64_t>(g)) * 1'000'003ULL;
    if (w.multi_turn) {
      for (int k = 0; k < q; ++k) {  // earlier turns and their answers
        r.segments.push_back({kQuestionBase + key + static_cast<uint64_t>(k), static_cast<int32_t>(w.question_len)});
        r.segments.push_back({kAnswerBase + key + static_cast<uint64_t>(k), static_cast<int32_t>(w.output_len)});
      }
    }
    r.segments.push_back({kQuestionBase + key + static_cast<uint64_t>(q), static_cast<int32_t>(w.question_len)});
    r.prompt_tokens = 0;
    for (const auto& s : r.segments) r.prompt_tokens += s.tokens;
    r.output_tokens = w.output_len;
    out.push_back(std::move(r));
  }
  return out;
}

absl::StatusOr<SharedPrefixWorkload> GieBenchmarkWorkload(std::string_view name) {
  SharedPrefixWorkload w;
  if (name == "short-questions__many-system-prompts") {
    w.groups = 150, w.prompts_per_group = 5, w.system_len = 6000, w.question_len = 1200, w.output_len = 1000;
  } else if (name == "long-questions__many-system-prompts") {
    w.groups = 150, w.prompts_per_group = 5, w.system_len = 1000, w.question_len = 6200, w.output_len = 1000;
  } else if (name == "short-questions__few-system-prompts__multi-chat") {
    // Questions: mean 30 tokens in GIE's file (sd 9); outputs follow a distribution there; we use means.
    w.groups = 6, w.prompts_per_group = 1000, w.system_len = 1000, w.question_len = 30, w.output_len = 100, w.multi_turn = true;
  } else if (name == "long-questions__few-system-prompts__multi-chat") {
    w.groups = 6, w.prompts_per_group = 1000, w.system_len = 1000, w.question_len = 3000, w.output_len = 1000, w.multi_turn = true;
  } else {
    return absl::NotFoundError(absl::StrCat(
        "unknown GIE workload '", std::string(name),
        "' (known: short-questions__many-system-prompts, long-questions__many-system-prompts, "
        "short-questions__few-system-prompts__multi-chat, long-questions__few-system-prompts__multi-chat)"));
  }
  return w;
}

namespace {

// `value` in units of `unit_us` microseconds, scaled: an error naming `what` when the result is
// negative, not finite or beyond 2^62 us (llround of such a value is unspecified).
absl::StatusOr<int64_t> ArrivalMicros(double value, double unit_us, double time_scale, const std::string& what) {
  const double us = value * unit_us * time_scale;
  if (!std::isfinite(us) || us > 4.6e18) return Bad(what + ": arrival time out of range");
  if (us < 0) return Bad(what + ": negative arrival time");
  return std::llround(us);
}

// The optional "region" member of a trace line: a string naming the arrival region.
absl::Status ReadRegion(const nlohmann::json& j, const std::string& where, ReplayRequest& r) {
  auto it = j.find("region");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_string() || it->get_ref<const std::string&>().empty() || it->get_ref<const std::string&>().size() > 63)
    return Bad(where + "region: expected a region name (a string of 1 to 63 characters)");
  r.region = it->get<std::string>();
  return absl::OkStatus();
}

// One JSON object per line, blank lines skipped; `each(line_number, text, object, where)` turns a
// line into a request (`where` is "path:line: " for its errors). The result is in arrival order.
template <typename Each>
absl::StatusOr<std::vector<ReplayRequest>> LoadJsonLinesTrace(const std::string& path, double time_scale, Each each) {
  if (!(time_scale > 0)) return Bad("time scale must be > 0");
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read trace '", path, "': ", internal::OsReason()));
  std::vector<ReplayRequest> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = absl::StrCat(path, ":", n, ": ");
    absl::StatusOr<nlohmann::json> parsed = internal::ParseJson(line);
    if (!parsed.ok()) return Bad(where + "not JSON: " + std::string(parsed.status().message()));
    const nlohmann::json& j = *parsed;
    if (!j.is_object()) return Bad(where + "not a JSON object");
    absl::StatusOr<ReplayRequest> r = each(n, line, j, where);
    if (!r.ok()) return r.status();
    out.push_back(*std::move(r));
  }
  std::stable_sort(out.begin(), out.end(), [](const ReplayRequest& a, const ReplayRequest& b) { return a.arrival_us < b.arrival_us; });
  return out;
}

}  // namespace

absl::StatusOr<std::vector<ReplayRequest>> LoadMooncakeTrace(const std::string& path, double time_scale) {
  constexpr int kBlockTokens = 512;
  return LoadJsonLinesTrace(path, time_scale, [&](int n, const std::string&, const nlohmann::json& j,
                                                  const std::string& where) -> absl::StatusOr<ReplayRequest> {
    auto num = [&](const char* k) -> absl::StatusOr<int64_t> {
      if (!j.contains(k) || !j[k].is_number()) return Bad(absl::StrCat(where, k, ": missing or not a number"));
      const double v = j[k].get<double>();
      if (!(v >= 0) || v > 1e15) return Bad(absl::StrCat(where, k, ": out of range"));
      return static_cast<int64_t>(v);
    };
    ReplayRequest r;
    auto ts = num("timestamp");
    auto il = num("input_length");
    auto ol = num("output_length");
    if (!ts.ok()) return ts.status();
    if (!il.ok()) return il.status();
    if (!ol.ok()) return ol.status();
    if (!j.contains("hash_ids") || !j["hash_ids"].is_array()) return Bad(where + "hash_ids: missing or not an array");
    absl::StatusOr<int64_t> at = ArrivalMicros(static_cast<double>(*ts), 1000.0, time_scale, where + "timestamp");
    if (!at.ok()) return at.status();
    r.arrival_us = *at;
    EPP_RETURN_IF_ERROR(ReadRegion(j, where, r));
    r.prompt_tokens = std::max<int64_t>(1, *il);
    r.output_tokens = std::max<int64_t>(1, *ol);
    int64_t left = r.prompt_tokens;
    size_t k = 0;
    for (const auto& id : j["hash_ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0)
        return Bad(absl::StrCat(where, "hash_ids[", k, "]: not a non-negative integer"));
      if (left <= 0) break;
      const int32_t tokens = static_cast<int32_t>(std::min<int64_t>(kBlockTokens, left));
      r.segments.push_back({kMooncakeBase + id.get<uint64_t>(), tokens});
      left -= tokens;
      ++k;
    }
    // Tokens beyond the listed blocks are unique to the request.
    if (left > 0) r.segments.push_back({kQuestionBase + (uint64_t{1} << 40) + static_cast<uint64_t>(n), static_cast<int32_t>(std::min<int64_t>(left, INT32_MAX))});
    return r;
  });
}

absl::StatusOr<std::vector<ReplayRequest>> LoadOpenAITrace(const std::string& path, double time_scale) {
  return replay_internal::LoadOpenAITraceLines(path, time_scale, true);
}

absl::StatusOr<std::vector<ReplayRequest>> replay_internal::LoadOpenAITraceLines(const std::string& path, double time_scale,
                                                                                bool require_arrival) {
  return LoadJsonLinesTrace(path, time_scale, [&](int n, const std::string& line, const nlohmann::json& j,
                                                  const std::string& where) -> absl::StatusOr<ReplayRequest> {
    absl::StatusOr<InferenceRequest> req = ParseCaptureEnvelope(line);
    if (!req.ok()) return Bad(where + std::string(req.status().message()));
    ReplayRequest r;
    // Without a required arrival a line's place in the file is its order (arrivals come later).
    absl::StatusOr<int64_t> at = require_arrival
                                     ? Bad(where + "no arrival time: give \"timestamp\" (ms) or \"arrival_s\", or a rate (--rate)")
                                     : absl::StatusOr<int64_t>(n);
    if (!require_arrival) {
      // arrivals are generated; the line's own time, if any, is ignored
    } else if (j.contains("timestamp") && j["timestamp"].is_number()) {
      at = ArrivalMicros(j["timestamp"].get<double>(), 1000.0, time_scale, where + "timestamp");
    } else if (j.contains("arrival_s") && j["arrival_s"].is_number()) {
      at = ArrivalMicros(j["arrival_s"].get<double>(), 1e6, time_scale, where + "arrival_s");
    }
    if (!at.ok()) return at.status();
    r.arrival_us = *at;
    EPP_RETURN_IF_ERROR(ReadRegion(j, where, r));
    r.model = req->model;
    r.text = req->prompt;
    r.prompt_tokens = std::max<int64_t>(1, req->prompt_tokens);
    r.output_tokens = 128;
    const nlohmann::json& body = j.contains("body") ? j["body"] : j;
    if (body.is_object()) {
      for (const char* k : {"max_tokens", "max_completion_tokens", "max_output_tokens"})
        if (auto it = body.find(k); it != body.end() && it->is_number_integer())
          if (std::optional<int64_t> v = internal::JsonInt64(*it); v && *v > 0) r.output_tokens = *v;
    }
    if (auto it = j.find("output_tokens"); it != j.end() && it->is_number_integer())
      if (std::optional<int64_t> v = internal::JsonInt64(*it); v && *v > 0) r.output_tokens = *v;
    if (auto it = j.find("priority"); it != j.end() && !it->is_null()) {
      std::optional<int64_t> v = it->is_number_integer() ? internal::JsonInt64(*it) : std::nullopt;
      if (!v || *v < INT32_MIN || *v > INT32_MAX) return Bad(where + "priority: expected an integer");
      r.priority = static_cast<int>(*v);
    }
    r.tenant = req->fairness_id;
    r.slo_ttft_ms = flowcontrol::SloTtftMs(*req);
    r.slo_tpot_ms = flowcontrol::SloTpotMs(*req);
    for (auto [key, slo] : {std::pair<const char*, int64_t*>{"slo_ttft_ms", &r.slo_ttft_ms}, {"slo_tpot_ms", &r.slo_tpot_ms}}) {
      auto it = j.find(key);
      if (it == j.end() || it->is_null()) continue;
      std::optional<int64_t> v = it->is_number_integer() ? internal::JsonInt64(*it) : std::nullopt;
      if (!v || *v < 0) return Bad(absl::StrCat(where, key, ": expected a number of milliseconds >= 0"));
      *slo = *v;
    }
    if (auto it = j.find("tenant"); it != j.end() && !it->is_null()) {
      if (!it->is_string() || it->get_ref<const std::string&>().size() > 253)
        return Bad(where + "tenant: expected a fairness id (a string of at most 253 characters)");
      r.tenant = it->get<std::string>();
    }
    return r;
  });
}

absl::StatusOr<TenantMix> ParseTenantMix(std::string_view tenants_view, std::string_view priorities_view, uint64_t seed) {
  // std::string: this Abseil's string_view is its own type, not std::string_view.
  const std::string tenants(tenants_view), priorities(priorities_view);
  TenantMix mix;
  mix.seed = seed;
  auto number = [](std::string_view text, double& out) {
    const std::string t(text);
    char* end = nullptr;
    out = std::strtod(t.c_str(), &end);
    return !t.empty() && end == t.c_str() + t.size() && std::isfinite(out);
  };
  if (!tenants.empty()) {
    double n = 0;
    if (tenants.find_first_of("=,") == std::string_view::npos && number(tenants, n)) {
      if (n < 1 || n > 10000 || n != std::floor(n))
        return Bad(absl::StrCat("--tenants: '", tenants, "': expected a count of tenants in [1, 10000] or NAME=WEIGHT,..."));
      for (int i = 1; i <= static_cast<int>(n); ++i) mix.tenants.emplace_back(absl::StrCat("t", i), 1.0);
    } else {
      for (const std::string& item : std::vector<std::string>(absl::StrSplit(tenants, ','))) {
        const size_t eq = item.find('=');
        const std::string name = item.substr(0, eq);
        double w = 1;
        if (name.empty() || (eq != std::string_view::npos && (!number(item.substr(eq + 1), w) || !(w > 0))))
          return Bad(absl::StrCat("--tenants: '", item, "': expected NAME or NAME=WEIGHT with a weight > 0"));
        for (const auto& [seen, unused] : mix.tenants)
          if (seen == name) return Bad(absl::StrCat("--tenants: tenant '", name, "' given twice"));
        mix.tenants.emplace_back(name, w);
      }
    }
  }
  if (!priorities.empty()) {
    for (const std::string& item : std::vector<std::string>(absl::StrSplit(priorities, ','))) {
      const size_t eq = item.find('=');
      double p = 0, share = 0;
      if (eq == std::string_view::npos || !number(item.substr(0, eq), p) || p != std::floor(p) || std::fabs(p) > 1e9 ||
          !number(item.substr(eq + 1), share) || !(share > 0))
        return Bad(absl::StrCat("--priority-mix: '", item, "': expected PRIORITY=SHARE (an integer and a share > 0)"));
      for (const auto& [seen, unused] : mix.priorities)
        if (seen == static_cast<int>(p)) return Bad(absl::StrCat("--priority-mix: priority ", seen, " given twice"));
      mix.priorities.emplace_back(static_cast<int>(p), share);
    }
  }
  return mix;
}

absl::Status AssignArrivals(std::vector<ReplayRequest>& trace, const TraceArrivals& arrivals) {
  if (!(arrivals.rate > 0) || !std::isfinite(arrivals.rate) || arrivals.rate > 1e9)
    return Bad("--rate: arrivals per second must be > 0");
  std::mt19937_64 rng(arrivals.seed);
  std::exponential_distribution<double> gap(arrivals.rate);
  double t = 0;
  for (ReplayRequest& r : trace) {
    r.arrival_us = std::llround(t * 1e6);
    t += arrivals.poisson ? gap(rng) : 1.0 / arrivals.rate;
  }
  return absl::OkStatus();
}

void AttachSlos(std::vector<ReplayRequest>& trace, int64_t ttft_ms, int64_t tpot_ms) {
  for (ReplayRequest& r : trace) {
    if (ttft_ms >= 0 && r.slo_ttft_ms < 0) r.slo_ttft_ms = ttft_ms;
    if (tpot_ms >= 0 && r.slo_tpot_ms < 0) r.slo_tpot_ms = tpot_ms;
  }
}

void MixTenants(std::vector<ReplayRequest>& trace, const TenantMix& mix) {
  // Cumulative weights, drawn from by a seeded generator: the same mix for the same trace and seed.
  auto cumulative = [](const auto& items) {
    std::vector<double> c;
    double sum = 0;
    for (const auto& [unused, w] : items) c.push_back(sum += w);
    return c;
  };
  const std::vector<double> tw = cumulative(mix.tenants), pw = cumulative(mix.priorities);
  std::mt19937_64 rng(mix.seed ^ 0x7e4a47f1c0ffee11ULL);
  auto draw = [&rng](const std::vector<double>& c) {
    const double u = std::uniform_real_distribution<double>(0, c.back())(rng);
    return static_cast<size_t>(std::upper_bound(c.begin(), c.end(), u) - c.begin()) % c.size();
  };
  for (ReplayRequest& r : trace) {
    if (!tw.empty()) r.tenant = mix.tenants[draw(tw)].first;
    if (!pw.empty()) r.priority = mix.priorities[draw(pw)].first;
  }
}

namespace {

// GIE's default weights with llm-d's precise prefix producer: the servers' KV events, not the
// EPP's own picks, say what each one holds.
std::string GiePreciseYaml(bool speculative) {
  return absl::StrCat(
      "plugins:\n- type: token-producer\n- type: precise-prefix-cache-producer\n",
      speculative ? "  parameters: {speculativeIndexing: true}\n" : "",
      "- type: prefix-cache-scorer\n"
      "  parameters: {prefixMatchInfoProducerName: precise-prefix-cache-producer}\n- type: queue-scorer\n"
      "- type: kv-cache-utilization-scorer\n- type: max-score-picker\nschedulingProfiles:\n- name: default\n"
      "  plugins:\n  - {pluginRef: queue-scorer, weight: 2}\n  - {pluginRef: kv-cache-utilization-scorer, weight: 2}\n"
      "  - {pluginRef: prefix-cache-scorer, weight: 3}\n  - pluginRef: max-score-picker\n");
}

// epp's own policy with the latency predictor feeding it when `predicted`
// (examples/configs/epp.yaml), without it otherwise (examples/configs/epp-static.yaml).
std::string EppYaml(bool predicted) {
  return absl::StrCat(
      "plugins:\n- type: approx-prefix-cache-producer\n  parameters: {maxPrefixTokensToMatch: 131072}\n",
      predicted ? "- type: predicted-latency-producer\n  parameters: {streamingMode: true}\n" : "",
      "- type: estimated-ttft-scorer\n"
      "  parameters: {prefillTokensPerSecond: 20000, stepOverheadMs: 6, missPenalty: 3, decodeMsPerSequence: 0.05,\n"
      "               expectedOutputTokens: 128}\n- type: active-request-scorer\n"
      "- type: max-score-picker\nschedulingProfiles:\n- name: default\n  plugins:\n"
      "  - {pluginRef: estimated-ttft-scorer, weight: 1}\n  - {pluginRef: active-request-scorer, weight: 0.02}\n"
      "  - pluginRef: max-score-picker\n");
}

const std::vector<std::pair<std::string, std::string>>& Baselines() {
  static const auto* kBaselines = new std::vector<std::pair<std::string, std::string>>{
      {"round-robin", "plugins:\n- type: round-robin-picker\n"},
      {"random", "plugins:\n- type: random-picker\n"},
      {"least-queue", "plugins:\n- type: queue-scorer\n"},
      {"least-inflight", "plugins:\n- type: token-load-scorer\n"},
      {"gie-default", ""},
      {"gie-precise", GiePreciseYaml(false)},
      // The same with llm-d's speculativeIndexing: a pick enters the request's blocks for the
      // endpoint it chose until that server's events confirm them (or 2 s pass).
      {"gie-precise-speculative", GiePreciseYaml(true)},
      {"sglang-cache-aware", "plugins:\n- type: cache-aware-scorer\n"},
      // llm-d Router's default since 2026-08, "sticky until saturated" (llm-d blog 2026-08-17):
      // keep the endpoints whose prefix match reaches affinityThreshold unless their estimated
      // TTFT is maxTTFTPenaltyMs worse than the best other's, then the least token load.
      {"llm-d-default",
       "plugins:\n- type: approx-prefix-cache-producer\n  parameters: {maxPrefixTokensToMatch: 131072}\n"
       "- type: prefix-cache-affinity-filter\n- type: token-load-scorer\n- type: max-score-picker\n"
       "schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: prefix-cache-affinity-filter\n"
       "  - pluginRef: token-load-scorer\n  - pluginRef: max-score-picker\n"},
      // llm-d's earlier default blend: prefix 3, queue 2, KV 2, no-hit-lru 2. Both llm-d policies
      // with llm-d's producer default maxPrefixTokensToMatch 131072 (GIE's: 256 blocks).
      {"llm-d-legacy-blend",
       "plugins:\n- type: approx-prefix-cache-producer\n  parameters: {maxPrefixTokensToMatch: 131072}\n"
       "- type: prefix-cache-scorer\n- type: queue-scorer\n- type: kv-cache-utilization-scorer\n"
       "- type: no-hit-lru-scorer\n- type: max-score-picker\nschedulingProfiles:\n- name: default\n  plugins:\n"
       "  - {pluginRef: prefix-cache-scorer, weight: 3}\n  - {pluginRef: queue-scorer, weight: 2}\n"
       "  - {pluginRef: kv-cache-utilization-scorer, weight: 2}\n  - {pluginRef: no-hit-lru-scorer, weight: 2}\n"
       "  - pluginRef: max-score-picker\n"},
      // vLLM production-stack's loadaware routing: matched/prompt - beta x relative load.
      {"vllm-loadaware", "plugins:\n- type: vllm-loadaware-scorer\n- type: max-score-picker\n"},
      // NVIDIA Dynamo's KV router cost (temperature 0: the lowest cost).
      {"dynamo-kv", "plugins:\n- type: dynamo-kv-cost-scorer\n- type: max-score-picker\n"},
      // Envoy's client-side weighted round robin from ORCA load reports (no EPP affinity).
      {"orca-wrr", "plugins:\n- type: orca-wrr-picker\n"},
      // llm-d Router's predicted-latency configuration (its chart's default-plugins.yaml with
      // router.latencyPredictor.enabled): a strict and a loose prefix-affinity gate around the
      // SLO headroom tiers, then the headroom scorer and a weighted random pick. streamingMode is
      // on, so TTFT is trained on first tokens (the chart's default, off, trains end-to-end
      // latency as "TTFT", which cannot meet a TTFT SLO); the same prefix producer as llm-d's
      // other policies.
      {"llm-d-predicted-latency",
       "plugins:\n- type: approx-prefix-cache-producer\n  parameters: {maxPrefixTokensToMatch: 131072}\n"
       "- type: predicted-latency-producer\n  parameters: {streamingMode: true}\n"
       "- name: strict-affinity-filter\n  type: prefix-cache-affinity-filter\n"
       "  parameters: {affinityThreshold: 0.99, ttftSource: latencyPredictor, maxTTFTPenaltyMs: 5000}\n"
       "- name: loose-affinity-filter\n  type: prefix-cache-affinity-filter\n"
       "  parameters: {affinityThreshold: 0.80, ttftSource: latencyPredictor, maxTTFTPenaltyMs: 5000}\n"
       "- type: latency-scorer\n- type: weighted-random-picker\n- type: slo-headroom-tier-filter\n"
       "- type: latency-slo-admitter\nschedulingProfiles:\n- name: default\n  plugins:\n"
       "  - pluginRef: predicted-latency-producer\n  - pluginRef: strict-affinity-filter\n"
       "  - pluginRef: slo-headroom-tier-filter\n  - pluginRef: loose-affinity-filter\n"
       "  - pluginRef: latency-scorer\n  - pluginRef: weighted-random-picker\n"},
      // epp's own (examples/configs/epp.yaml, the same configuration): the latency predictor's
      // predicted-latency-producer measures every server's prefill rate on its lightly loaded
      // responses and estimated-ttft-scorer's learnSpeeds drains each server's queue at it.
      {"epp", EppYaml(true)},
      // The same without the predictor: every server at the configured rate
      // (examples/configs/epp-static.yaml; `epp` until 2026-12-07).
      {"epp-static", EppYaml(false)},
  };
  return *kBaselines;
}

}  // namespace

std::vector<std::string> NamedReplayPolicies() {
  std::vector<std::string> out;
  for (const auto& [name, yaml] : Baselines()) out.push_back(name);
  return out;
}

absl::StatusOr<ReplayPolicy> NamedReplayPolicy(std::string_view name) {
  for (const auto& [n, body] : Baselines()) {
    if (n != name) continue;
    ReplayPolicy p;
    p.name = n;
    if (body.empty()) {
      p.config = DefaultConfig();
    } else {
      EPP_ASSIGN_OR_RETURN(p.config,
                           ParseConfig(absl::StrCat("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n", body),
                                       absl::StrCat("<policy ", n, ">")));
    }
    p.config.source = absl::StrCat("<policy ", n, ">");
    return p;
  }
  return absl::NotFoundError(absl::StrCat("unknown policy '", std::string(name), "' (named policies: ",
                                          absl::StrJoin(NamedReplayPolicies(), ", "), "; or a config file)"));
}

}  // namespace epp
