// Rendering one decision for people (explain text) and programs (explain JSON).
#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json.h"
#include "common/strings.h"
#include "epp/prefix_cache.h"
#include "epp/scheduler.h"

namespace epp {
namespace {

using internal::Num;
using json = nlohmann::ordered_json;

const char* StatusText(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 503: return "Service Unavailable";
    default: return "";
  }
}

// The scorer that contributed most to the winner's lead over the runner-up.
struct Margin {
  const ScorerTrace* win = nullptr;
  const ScorerTrace* lose = nullptr;
};

Margin DecidingScorer(const EndpointScoreTrace& a, const EndpointScoreTrace& b) {
  Margin m;
  double best = -1e300;
  for (size_t i = 0; i < a.scorers.size() && i < b.scorers.size(); ++i) {
    const double d = a.scorers[i].weighted - b.scorers[i].weighted;
    if (d > best) {
      best = d;
      m.win = &a.scorers[i];
      m.lose = &b.scorers[i];
    }
  }
  return m;
}

const ProfileTrace* PrimaryTrace(const PickResult& r) {
  for (const ProfileTrace& p : r.profiles)
    if (p.name == r.primary_profile) return &p;
  return r.profiles.empty() ? nullptr : &r.profiles.front();
}

}  // namespace

DecisionSummary SummarizeDecision(const PickResult& r) {
  DecisionSummary d;
  const ProfileTrace* p = PrimaryTrace(r);
  if (!p || r.status != 200 || p->scores.empty() || r.endpoints.empty()) return d;
  const EndpointScoreTrace* win = nullptr;
  for (const auto& s : p->scores)
    if (s.endpoint == r.endpoints.front()) win = &s;
  if (!win) return d;
  const EndpointScoreTrace* second = nullptr;
  for (const auto& s : p->scores)
    if (&s != win) {
      second = &s;  // scores are sorted by total, highest first
      break;
    }
  d.winner = win->endpoint;
  d.winner_score = win->total;
  if (!second) {
    d.kind = "alone";
    return d;
  }
  d.runner_up = second->endpoint;
  d.runner_up_score = second->total;
  const double gap = win->total - second->total;
  if (gap > 1e-12) {
    const Margin m = DecidingScorer(*win, *second);
    d.kind = m.win ? "margin" : "tie";
    if (m.win) {
      d.deciding_scorer = m.win->plugin;
      d.deciding_winner = m.win->weighted;
      d.deciding_runner_up = m.lose->weighted;
      d.deciding_winner_raw = m.win->raw;
      d.deciding_runner_up_raw = m.lose->raw;
      d.deciding_weight = m.win->weight;
    }
  } else {
    d.kind = gap > -1e-12 ? "tie" : "picker";
  }
  return d;
}

std::string PickResultToJson(const InferenceRequest* request, const PickResult& r, int indent) {
  json j;
  if (request) {
    j["request"] = {{"model", request->model},
                    {"path", request->path},
                    {"api", std::string(ApiKindName(request->api))},
                    {"stream", request->stream},
                    {"priority", request->priority},
                    {"fairness_id", r.fairness_id.empty() ? request->fairness_id : r.fairness_id},
                    {"prompt_chars", request->prompt.size()},
                    {"prompt_tokens", request->prompt_tokens},
                    {"prefix_blocks", r.prefix_blocks},
                    {"prefix_block_size_tokens", r.prefix_block_size_tokens}};
    if (r.tokens >= 0) {
      j["request"]["tokens"] = {{"count", r.tokens}, {"source", r.tokens_source}};
      if (!r.tokens_note.empty()) j["request"]["tokens"]["note"] = r.tokens_note;
    }
  } else {
    j["request"] = nullptr;
  }
  // predicted-latency-producer's view of the primary endpoint, and the request's SLOs.
  if (r.predicted_ttft_ms >= 0 || r.slo_ttft_ms > 0 || r.slo_tpot_ms > 0) {
    json lat = json::object();
    if (r.predicted_ttft_ms >= 0) lat["predicted_ttft_ms"] = r.predicted_ttft_ms;
    if (r.predicted_tpot_ms >= 0) lat["predicted_tpot_ms"] = r.predicted_tpot_ms;
    if (r.slo_ttft_ms > 0) lat["slo_ttft_ms"] = r.slo_ttft_ms;
    if (r.slo_tpot_ms > 0) lat["slo_tpot_ms"] = r.slo_tpot_ms;
    j["latency"] = std::move(lat);
  }
  json profiles = json::array();
  for (const ProfileTrace& p : r.profiles) {
    json jp;
    jp["name"] = p.name;
    jp["ran"] = p.ran;
    if (!p.reason.empty()) jp["reason"] = p.reason;
    json filters = json::array();
    for (const FilterTrace& f : p.filters) {
      json removed = json::array();
      for (const auto& x : f.removed) removed.push_back({{"endpoint", x.endpoint}, {"reason", x.reason}});
      filters.push_back({{"plugin", f.plugin}, {"type", f.type}, {"kept", f.kept}, {"removed", removed}});
    }
    jp["filters"] = filters;
    json scores = json::array();
    for (const EndpointScoreTrace& s : p.scores) {
      json sc = json::array();
      for (const ScorerTrace& t : s.scorers)
        sc.push_back({{"plugin", t.plugin}, {"type", t.type}, {"raw", t.raw}, {"weight", t.weight},
                      {"weighted", t.weighted}, {"detail", t.detail}});
      scores.push_back({{"endpoint", s.endpoint}, {"total", s.total}, {"scorers", sc}});
    }
    jp["scores"] = scores;
    jp["picker"] = p.picker;
    jp["picked"] = p.picked;
    if (!p.error.empty()) jp["error"] = p.error;
    profiles.push_back(jp);
  }
  j["profiles"] = profiles;
  json result;
  result["status"] = r.status;
  result["endpoint"] = r.endpoints.empty() ? json(nullptr) : json(r.endpoints.front());
  result["fallbacks"] = r.endpoints.size() > 1 ? json(std::vector<std::string>(r.endpoints.begin() + 1, r.endpoints.end()))
                                               : json::array();
  result["reason"] = r.reason;
  result["primary_profile"] = r.primary_profile.empty() ? json(nullptr) : json(r.primary_profile);
  if (!r.profiles_reason.empty()) result["profiles_reason"] = r.profiles_reason;
  if (!r.model_rewrite.empty()) result["model_rewrite"] = r.model_rewrite;
  // Every profile the handler ran or skipped (also without a trace): what pick and replay report.
  json picks = json::array();
  for (const ProfilePick& pp : r.profile_picks) {
    json jp = {{"profile", pp.profile}, {"ran", pp.ran}, {"endpoints", pp.endpoints}};
    if (!pp.reason.empty()) jp["reason"] = pp.reason;
    if (!pp.error.empty()) jp["error"] = pp.error;
    picks.push_back(std::move(jp));
  }
  result["profile_picks"] = std::move(picks);
  result["candidates"] = r.candidates;
  if (!r.unreachable.empty()) result["unreachable"] = r.unreachable;
  result["saturation"] = std::isfinite(r.saturation) ? json(r.saturation) : json(nullptr);
  if (!r.saturation_detail.empty()) result["saturation_detail"] = r.saturation_detail;
  j["result"] = result;
  if (r.status == 200) {
    const std::string v = r.DestinationValue();
    json headers = {{"x-gateway-destination-endpoint", v}};
    for (const auto& [k, val] : r.headers) headers[k] = val;
    j["decision"] = {{"header", std::move(headers)},
                     {"dynamic_metadata", {{"envoy.lb", {{"x-gateway-destination-endpoint", v}}}}}};
  } else {
    j["decision"] = {{"immediate_response", {{"status", r.status}, {"body", r.reason}}}};
    if (!r.dropped_reason.empty())
      j["decision"]["immediate_response"]["headers"] = {{"x-llm-d-request-dropped-reason", r.dropped_reason}};
  }
  // Names and reasons carry config and label text, which YAML does not require to be UTF-8: a
  // byte that is not becomes U+FFFD instead of a JSON writer exception (explain is diagnostic).
  return internal::DumpJsonLossy(j, indent);
}

std::string PickResultToText(const InferenceRequest* request, const PickResult& r, bool color) {
  const std::string bold = color ? "\033[1m" : "", dim = color ? "\033[2m" : "", reset = color ? "\033[0m" : "";
  const std::string green = color ? "\033[32m" : "", red = color ? "\033[31m" : "";
  std::string out;
  if (request) {
    absl::StrAppend(&out, bold, "request", reset, "    ", request->path, "  model=", request->model, "  ",
                    request->prompt.size(), " prompt chars (~", request->prompt_tokens, " tokens)");
    if (r.prefix_block_size_tokens > 0)
      absl::StrAppend(&out, ", ", r.prefix_blocks, r.prefix_blocks == 1 ? " prefix block of " : " prefix blocks of ",
                      r.prefix_block_size_tokens, " tokens (",
                      r.prefix_block_size_tokens * kCharsPerToken, " chars)");
    if (request->priority != 0) absl::StrAppend(&out, "  priority ", request->priority);
    // The cycle's fairness id: the header's, or what agent-identity derived from a session header.
    const std::string& fairness = r.fairness_id.empty() ? request->fairness_id : r.fairness_id;
    if (!fairness.empty()) absl::StrAppend(&out, "  fairness id ", fairness);
    out += "\n";
    if (r.tokens >= 0) {
      absl::StrAppend(&out, bold, "tokens", reset, "     ", r.tokens, " from ", r.tokens_source);
      if (!r.tokens_note.empty()) absl::StrAppend(&out, " ", red, "(", r.tokens_note, ")", reset);
      out += "\n";
    }
  }
  if (r.predicted_ttft_ms >= 0 || r.slo_ttft_ms > 0 || r.slo_tpot_ms > 0) {
    absl::StrAppend(&out, bold, "latency", reset, "    ");
    if (r.predicted_ttft_ms >= 0) {
      absl::StrAppend(&out, "predicted TTFT ", Num(r.predicted_ttft_ms), " ms");
      if (r.predicted_tpot_ms > 0) absl::StrAppend(&out, ", TPOT ", Num(r.predicted_tpot_ms), " ms");
    } else {
      out += "no prediction";
    }
    if (r.slo_ttft_ms > 0) absl::StrAppend(&out, "  SLO TTFT ", Num(r.slo_ttft_ms), " ms");
    if (r.slo_tpot_ms > 0) absl::StrAppend(&out, "  SLO TPOT ", Num(r.slo_tpot_ms), " ms");
    out += "\n";
  }
  if (r.status != 400) {
    absl::StrAppend(&out, bold, "candidates", reset, " ", r.candidates);
    if (!r.unreachable.empty())
      absl::StrAppend(&out, dim, "  (passed over, last scrape refused: ", absl::StrJoin(r.unreachable, ", "), ")", reset);
    out += "\n";
    if (!r.saturation_detail.empty()) absl::StrAppend(&out, bold, "saturation", reset, " ", r.saturation_detail, "\n");
  }
  const bool several = r.profiles.size() > 1;
  for (const ProfileTrace& p : r.profiles) {
    if (!p.ran) {
      absl::StrAppend(&out, "\n", bold, "profile ", p.name, reset, dim, "  skipped", reset, ": ", p.reason, "\n");
      continue;
    }
    absl::StrAppend(&out, "\n", bold, "profile ", p.name, reset, several && p.name == r.primary_profile ? " (primary)" : "",
                    p.reason.empty() ? "" : dim + "  " + p.reason + reset, "\n");
    for (const FilterTrace& f : p.filters) {
      absl::StrAppend(&out, "  filter ", f.plugin, f.plugin != f.type ? " (" + f.type + ")" : "", ": kept ",
                      f.kept.size(), ", removed ", f.removed.size(), "\n");
      for (const auto& x : f.removed) absl::StrAppend(&out, "    ", red, "- ", x.endpoint, reset, "  ", x.reason, "\n");
    }
    if (!p.scores.empty()) {
      // Table: endpoint | per scorer "raw x weight = weighted" | total.
      std::vector<std::string> header = {"endpoint"};
      for (const ScorerTrace& t : p.scores.front().scorers) header.push_back(absl::StrCat(t.plugin, " (x", Num(t.weight), ")"));
      header.push_back("total");
      std::vector<std::vector<std::string>> rows;
      for (const EndpointScoreTrace& s : p.scores) {
        const bool picked = std::find(p.picked.begin(), p.picked.end(), s.endpoint) != p.picked.end();
        std::vector<std::string> row = {(picked ? "* " : "  ") + s.endpoint};
        for (const ScorerTrace& t : s.scorers) row.push_back(absl::StrCat(Num(t.raw), " -> ", Num(t.weighted)));
        row.push_back(Num(s.total));
        rows.push_back(std::move(row));
      }
      std::vector<size_t> width(header.size(), 0);
      width[0] = 2;
      for (size_t c = 0; c < header.size(); ++c) width[c] = std::max(width[c], header[c].size() + (c == 0 ? 2 : 0));
      for (const auto& row : rows)
        for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
      out += "  ";
      for (size_t c = 0; c < header.size(); ++c) {
        std::string h = c == 0 ? "  " + header[c] : header[c];
        absl::StrAppend(&out, dim, h, reset, c + 1 < header.size() ? std::string(width[c] - h.size() + 2, ' ') : "");
      }
      out += "\n";
      for (const auto& row : rows) {
        out += "  ";
        for (size_t c = 0; c < row.size(); ++c) absl::StrAppend(&out, row[c], std::string(width[c] - row[c].size() + 2, ' '));
        while (!out.empty() && out.back() == ' ') out.pop_back();
        out += "\n";
      }
      // Scorer details (why each raw score is what it is), for the top endpoints.
      const size_t shown = std::min<size_t>(p.scores.size(), 4);
      for (size_t i = 0; i < shown; ++i) {
        std::vector<std::string> details;
        for (const ScorerTrace& t : p.scores[i].scorers)
          if (!t.detail.empty()) details.push_back(absl::StrCat(t.plugin, ": ", t.detail));
        if (!details.empty()) absl::StrAppend(&out, "  ", dim, p.scores[i].endpoint, "  ", absl::StrJoin(details, "; "), reset, "\n");
      }
      if (p.scores.size() > shown) absl::StrAppend(&out, "  ", dim, "(", p.scores.size() - shown, " more endpoints)", reset, "\n");
    }
    if (!p.picked.empty()) absl::StrAppend(&out, "  picked ", absl::StrJoin(p.picked, ", "), " by ", p.picker, "\n");
    if (!p.error.empty()) absl::StrAppend(&out, "  ", red, "no endpoint: ", p.error, reset, "\n");
  }

  // Winner vs runner-up.
  if (const DecisionSummary d = SummarizeDecision(r); !d.kind.empty()) {
    absl::StrAppend(&out, "\n", bold, "winner", reset, "     ", d.winner, " total ", Num(d.winner_score));
    if (d.kind != "alone") {
      absl::StrAppend(&out, " vs runner-up ", d.runner_up, " ", Num(d.runner_up_score));
      if (d.kind == "margin") {
        absl::StrAppend(&out, "\n           won on ", d.deciding_scorer, ": ", Num(d.deciding_winner_raw), " x ",
                        Num(d.deciding_weight), " = ", Num(d.deciding_winner), " vs ", Num(d.deciding_runner_up_raw), " x ",
                        Num(d.deciding_weight), " = ", Num(d.deciding_runner_up), " (margin ",
                        Num(d.winner_score - d.runner_up_score), ")");
      } else if (d.kind == "tie") {
        absl::StrAppend(&out, "\n           tie on total score: broken at random by the picker (seed decides)");
      } else {
        absl::StrAppend(&out, "\n           a lower total won: the picker (", PrimaryTrace(r)->picker, ") is not max-score");
      }
    }
    out += "\n";
  }

  absl::StrAppend(&out, out.empty() ? "" : "\n", bold, "result", reset, "     ", r.status == 200 ? green : red, r.status, " ",
                  StatusText(r.status), reset);
  if (r.status == 200) {
    absl::StrAppend(&out, "  endpoint ", r.endpoints.front());
    if (r.endpoints.size() > 1)
      absl::StrAppend(&out, "  fallbacks ", absl::StrJoin(r.endpoints.begin() + 1, r.endpoints.end(), ","));
  }
  absl::StrAppend(&out, "\n           ", r.reason, "\n");
  if (!r.profiles_reason.empty()) absl::StrAppend(&out, "           profiles: ", r.profiles_reason, "\n");
  if (!r.model_rewrite.empty()) absl::StrAppend(&out, "      model rewrite: ", r.model_rewrite, "\n");
  absl::StrAppend(&out, bold, "decision", reset, "   ");
  if (r.status == 200) {
    const std::string v = r.DestinationValue();
    absl::StrAppend(&out, "header x-gateway-destination-endpoint: ", v, "\n");
    for (const auto& [k, val] : r.headers) absl::StrAppend(&out, "           header ", k, ": ", val, "\n");
    absl::StrAppend(&out, "           metadata envoy.lb {\"x-gateway-destination-endpoint\": \"", v, "\"}\n");
  } else {
    absl::StrAppend(&out, "ImmediateResponse ", r.status, ": ", r.reason, "\n");
    if (!r.dropped_reason.empty())
      absl::StrAppend(&out, "           header x-llm-d-request-dropped-reason: ", r.dropped_reason, "\n");
  }
  return out;
}

}  // namespace epp
