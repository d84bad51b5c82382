// Two label-driven affinity scorers of llm-d Router:
//   context-length-aware: endpoints declare the prompt lengths they are meant for with a label
//     "min-max" (llm-d.ai/context-length-range); the request's token count ranks them in tiers,
//     and with enableFiltering the plugin is also a filter keeping only the endpoints whose range
//     holds it (unlabelled endpoints always stay).
//   header-label-affinity-scorer: 1 for endpoints whose label labelKey equals the request header
//     headerName, 0 for the others (a soft preference; one instance per header-label pair).
// Facts: llm-d-router's scheduling/scorer/contextlengthaware and scorer/headerlabelaffinity.
#include <charconv>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "epp/scheduling.h"
#include "plugins/scorer/scorer.h"

namespace epp::plugins {
namespace {

using internal::TrimSpace;

// ---- context-length-aware

struct ContextLengthOptions {
  std::string label = std::string(kContextLengthRangeLabel);
  bool enable_filtering = false;
};

const ParamTable<ContextLengthOptions>& ContextLengthTable() {
  static const auto* t = &(*new ParamTable<ContextLengthOptions>())
                              .String("label", &ContextLengthOptions::label,
                                      "endpoint label holding the \"min-max\" token range the endpoint serves")
                              .Bool("enableFiltering", &ContextLengthOptions::enable_filtering,
                                    "also a filter: remove endpoints whose range does not hold the request's tokens");
  return *t;
}

struct TokenRange {
  int64_t min = 0, max = 0;
};

// A non-negative decimal integer with an optional '+', blanks around it allowed (Go's Atoi of the
// trimmed text; a '-' cannot occur since it separates the bounds).
std::optional<int64_t> ParseBound(std::string_view s) {
  s = TrimSpace(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// "min-max" with min <= max (exactly one '-'); nullopt for anything else.
std::optional<TokenRange> ParseRange(std::string_view text) {
  const size_t dash = text.find('-');
  if (dash == std::string_view::npos || text.find('-', dash + 1) != std::string_view::npos) return std::nullopt;
  std::optional<int64_t> lo = ParseBound(text.substr(0, dash)), hi = ParseBound(text.substr(dash + 1));
  if (!lo || !hi || *lo > *hi) return std::nullopt;
  return TokenRange{*lo, *hi};
}

// llm-d's tiers: a range holding the request scores in (0.3, 1], more for a narrow range
// (width 10,000 tokens halves that part) and for headroom above the request; a range missing it
// scores in [0, 0.3), less the further its nearest bound is (1,000 tokens away halves it), so
// the closest range wins when none holds the request.
double RangeScore(int64_t tokens, TokenRange r) {
  constexpr double kFallbackCeiling = 0.3;
  if (tokens >= r.min && tokens <= r.max) {
    const double width = static_cast<double>(r.max - r.min);
    if (width == 0) return 1.0;
    const double narrow = 1.0 / (1.0 + width / 10000.0);
    const double headroom = static_cast<double>(r.max - tokens) / width;
    return kFallbackCeiling + (0.7 * narrow + 0.3 * headroom) * (1.0 - kFallbackCeiling);
  }
  const double distance = static_cast<double>(tokens > r.max ? tokens - r.max : r.min - tokens);
  return kFallbackCeiling / (1.0 + distance / 1000.0);
}

class ContextLengthAware : public Plugin, public Scorer, public Filter {
 public:
  ContextLengthAware(TypedName tn, ContextLengthOptions o) : Plugin(std::move(tn)), o_(std::move(o)) {}
  const Scorer* AsScorer() const override { return this; }
  const Filter* AsFilter() const override { return o_.enable_filtering ? this : nullptr; }
  PluginInputs Consumes() const override { return {PluginInput::kLabels}; }
  Params EffectiveParams() const override { return ContextLengthTable().Effective(o_); }
  ScorerCategory category() const override { return ScorerCategory::kAffinity; }

  void Score(const SchedulingContext& ctx, Candidates candidates, std::span<double> scores) const override {
    const int64_t tokens = Tokens(ctx);
    for (size_t i = 0; i < candidates.size(); ++i) {
      const std::string* label = Label(*candidates[i]);
      if (label == nullptr) {
        scores[i] = 0.5;  // no range declared: neutral
      } else if (std::optional<TokenRange> r = ParseRange(*label)) {
        scores[i] = RangeScore(tokens, *r);
      } else {
        scores[i] = 0.0;
      }
    }
  }
  std::string Explain(const SchedulingContext& ctx, const Endpoint& e) const override {
    const std::string* label = Label(e);
    if (label == nullptr) return absl::StrCat("no ", o_.label, " label (neutral)");
    std::optional<TokenRange> r = ParseRange(*label);
    if (!r) return absl::StrCat("unreadable range '", *label, "'");
    const int64_t tokens = Tokens(ctx);
    const bool in = tokens >= r->min && tokens <= r->max;
    return absl::StrCat(tokens, " tokens ", in ? "within " : "outside ", r->min, "-", r->max);
  }

  std::vector<const Endpoint*> Apply(const SchedulingContext& ctx, Candidates candidates) const override {
    const int64_t tokens = Tokens(ctx);
    std::vector<const Endpoint*> kept;
    for (const Endpoint* e : candidates) {
      const std::string* label = Label(*e);
      if (label == nullptr) {
        kept.push_back(e);  // no range declared: any length
        continue;
      }
      std::optional<TokenRange> r = ParseRange(*label);
      if (r && tokens >= r->min && tokens <= r->max) kept.push_back(e);
    }
    return kept;
  }
  std::string WhyRemoved(const SchedulingContext& ctx, const Endpoint& e) const override {
    const std::string* label = Label(e);
    std::optional<TokenRange> r = label ? ParseRange(*label) : std::nullopt;
    if (!r) return absl::StrCat("unreadable ", o_.label, " '", label ? *label : "", "'");
    return absl::StrCat(Tokens(ctx), " tokens outside ", r->min, "-", r->max);
  }

 private:
  // The request's token count: a token-producer's ids when one ran, else the request's own
  // estimate (what llm-d's token-producer with its estimate backend, which llm-d adds when none
  // is configured, counts).
  static int64_t Tokens(const SchedulingContext& ctx) {
    if (ctx.tokens.computed) return static_cast<int64_t>(ctx.tokens.ids.size());
    return ctx.request ? ctx.request->prompt_tokens : 0;
  }
  const std::string* Label(const Endpoint& e) const {
    auto it = e.labels.find(o_.label);
    return it == e.labels.end() ? nullptr : &it->second;
  }
  ContextLengthOptions o_;
};

// ---- header-label-affinity-scorer

struct HeaderLabelOptions {
  std::string header;  // lower case
  std::string label_key;
};

const ParamTable<HeaderLabelOptions>& HeaderLabelTable() {
  static const auto* t = &(*new ParamTable<HeaderLabelOptions>())
                              .String("headerName", &HeaderLabelOptions::header,
                                      "request header holding the preferred label value (required)")
                              .String("labelKey", &HeaderLabelOptions::label_key,
                                      "endpoint label compared with the header (required)");
  return *t;
}

class HeaderLabelAffinity : public Plugin, public Scorer {
 public:
  HeaderLabelAffinity(TypedName tn, HeaderLabelOptions o) : Plugin(std::move(tn)), o_(std::move(o)) {}
  const Scorer* AsScorer() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kLabels}; }
  Params EffectiveParams() const override { return HeaderLabelTable().Effective(o_); }
  ScorerCategory category() const override { return ScorerCategory::kAffinity; }

  void Score(const SchedulingContext& ctx, Candidates candidates, std::span<double> scores) const override {
    const std::string_view wanted = Wanted(ctx);
    for (size_t i = 0; i < candidates.size(); ++i) scores[i] = Matches(*candidates[i], wanted) ? 1.0 : 0.0;
  }
  std::string Explain(const SchedulingContext& ctx, const Endpoint& e) const override {
    const std::string_view wanted = Wanted(ctx);
    if (wanted.empty()) return absl::StrCat("no ", o_.header, " header");
    auto it = e.labels.find(o_.label_key);
    if (it == e.labels.end()) return absl::StrCat("no ", o_.label_key, " label");
    return absl::StrCat(o_.label_key, "=", it->second, Matches(e, wanted) ? " matches " : " differs from ", o_.header);
  }

 private:
  std::string_view Wanted(const SchedulingContext& ctx) const {
    if (!ctx.request) return {};
    return ctx.request->header(o_.header).value_or(std::string_view());
  }
  bool Matches(const Endpoint& e, std::string_view wanted) const {
    if (wanted.empty()) return false;  // no header: no preference
    auto it = e.labels.find(o_.label_key);
    return it != e.labels.end() && it->second == wanted;
  }
  HeaderLabelOptions o_;
};

}  // namespace

PluginOr CreateContextLengthAware(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(ContextLengthOptions o, ContextLengthTable().Read(params));
  if (o.label.empty())
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ".label: must not be empty"));
  return std::make_unique<ContextLengthAware>(TN(kContextLengthAwareType, name), std::move(o));
}

PluginOr CreateHeaderLabelAffinityScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(HeaderLabelOptions o, HeaderLabelTable().Read(params));
  o.header = absl::AsciiStrToLower(o.header);
  const std::string at = params.path().empty() ? "parameters" : params.path();
  if (o.header.empty()) return absl::InvalidArgumentError(absl::StrCat(at, ".headerName: is required"));
  if (o.label_key.empty()) return absl::InvalidArgumentError(absl::StrCat(at, ".labelKey: is required"));
  return std::make_unique<HeaderLabelAffinity>(TN(kHeaderLabelAffinityScorerType, name), std::move(o));
}

PluginSchema ContextLengthAwareSchema() { return ContextLengthTable().Schema(); }
PluginSchema HeaderLabelAffinityScorerSchema() { return HeaderLabelTable().Schema(); }

}  // namespace epp::plugins
