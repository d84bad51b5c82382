// `eppctl check` logic: scrape, parse, detect, extract, probe the OpenAI APIs, report.
#include "epp/tools/check.h"

#include "common/strings.h"

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace epp {
namespace {

using Json = nlohmann::ordered_json;  // keeps keys in the documented order

bool IsUrl(std::string_view t) { return t.rfind("http://", 0) == 0 || t.rfind("https://", 0) == 0; }

std::string TrimSlash(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}


// The metrics checks in report order.
constexpr const char* kMetricCheckIds[] = {"metrics.parse", "metrics.engine", "metrics.queue", "metrics.running",
                                           "metrics.kv_cache", "metrics.lora", "metrics.cache_info"};

// Marks every metrics check from `first_id` on as skipped for `reason`.
void SkipMetricChecks(TargetReport& rep, std::string_view first_id, const std::string& reason) {
  bool on = false;
  for (const char* id : kMetricCheckIds) {
    on = on || first_id == id;
    if (on) rep.checks.push_back({id, CheckStatus::kSkip, reason});
  }
}

struct Pending {
  size_t target;
  std::string check_id;
};

HttpRequest MakeRequest(const CheckOptions& o, std::string url, std::string method = "GET", std::string body = "") {
  HttpRequest r;
  r.url = std::move(url);
  r.method = std::move(method);
  r.body = std::move(body);
  r.timeout = o.timeout;
  r.insecure = o.insecure;
  r.max_body_bytes = o.max_body_bytes;
  r.headers = o.headers;
  if (!o.bearer_token.empty()) r.headers.push_back("Authorization: Bearer " + o.bearer_token);
  if (!r.body.empty()) r.headers.push_back("Content-Type: application/json");
  return r;
}

// Validates the metrics text of one target and fills the report (ReadEndpointMetrics, worded
// as `eppctl check` reports it).
void CheckMetricsText(std::string_view text, const CheckOptions& options, const MetricMappings& mappings,
                      TargetReport& rep) {
  const MetricsRead read = ReadEndpointMetrics(text, mappings, options.engine);
  if (!read.parsed) {
    rep.checks.push_back({"metrics.parse", CheckStatus::kFail,
                          std::string(read.error.message()) + " (use --lenient to skip malformed lines)"});
    SkipMetricChecks(rep, "metrics.engine", "metrics did not parse");
    return;
  }
  std::string msg = std::to_string(read.families) + " families, " + std::to_string(read.samples) + " samples";
  if (!read.skipped.empty()) {
    const auto& first = read.skipped.front();
    rep.checks.push_back({"metrics.parse", CheckStatus::kWarn,
                          msg + "; skipped " + std::to_string(read.skipped.size()) + " malformed lines (first: line " +
                              std::to_string(first.first) + ": " + first.second + ")"});
  } else {
    rep.checks.push_back({"metrics.parse", CheckStatus::kPass, msg});
  }
  if (!read.error.ok()) {
    rep.checks.push_back({"metrics.engine", CheckStatus::kFail, std::string(read.error.message())});
    SkipMetricChecks(rep, "metrics.queue", "no engine detected");
    return;
  }
  rep.engine = read.engine;
  rep.checks.push_back(
      {"metrics.engine", CheckStatus::kPass, read.engine + (read.detected ? " (auto-detected)" : " (set with --engine)")});
  rep.metrics = read.extraction.metrics;
  for (const CheckResult& c : read.extraction.checks) rep.checks.push_back(c);
}

absl::StatusOr<Json> ParseJsonBody(const HttpResponse& r) {
  if (r.status != 200) return absl::FailedPreconditionError("HTTP " + std::to_string(r.status) + ": " + internal::BodySnippet(r.body));
  Json j = Json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::FailedPreconditionError("body is not JSON: " + internal::BodySnippet(r.body));
  if (!j.is_object()) return absl::FailedPreconditionError("body is not a JSON object: " + internal::BodySnippet(r.body));
  return j;
}

CheckResult JudgeModels(const absl::StatusOr<HttpResponse>& r, std::vector<std::string>& models) {
  CheckResult c{"api.models", CheckStatus::kFail, ""};
  if (!r.ok()) {
    c.message = std::string(r.status().message());
    return c;
  }
  auto j = ParseJsonBody(*r);
  if (!j.ok()) {
    c.message = "GET /v1/models: " + std::string(j.status().message());
    return c;
  }
  auto it = j->find("data");
  if (it == j->end() || !it->is_array()) {
    c.message = "GET /v1/models: no 'data' list in the answer";
    return c;
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    if (!m.is_object() || !m.contains("id") || !m["id"].is_string()) {
      c.message = "GET /v1/models: data[" + std::to_string(i) + "].id is missing or not a string";
      return c;
    }
    models.push_back(m["id"].get<std::string>());
  }
  if (models.empty()) {
    c.message = "GET /v1/models lists no model";
    return c;
  }
  c.status = CheckStatus::kPass;
  c.message = std::to_string(models.size()) + " model" + (models.size() == 1 ? "" : "s") + ": ";
  for (size_t i = 0; i < models.size() && i < 5; ++i) c.message += (i ? ", " : "") + models[i];
  if (models.size() > 5) c.message += ", ...";
  return c;
}

std::string UsageText(const Json& j) {
  if (j.contains("usage") && j["usage"].is_object() && j["usage"].contains("prompt_tokens")) {
    return ", usage prompt_tokens=" + j["usage"]["prompt_tokens"].dump();
  }
  return "";
}

CheckResult JudgeCompletion(const absl::StatusOr<HttpResponse>& r, const std::string& id, const char* object,
                            const std::string& model) {
  CheckResult c{id, CheckStatus::kFail, ""};
  const std::string what = id == "api.completions" ? "POST /v1/completions" : "POST /v1/chat/completions";
  if (!r.ok()) {
    c.message = std::string(r.status().message());
    return c;
  }
  auto j = ParseJsonBody(*r);
  if (!j.ok()) {
    c.message = what + ": " + std::string(j.status().message());
    return c;
  }
  if (!j->contains("object") || (*j)["object"] != object) {
    c.message = what + ": object is " + (j->contains("object") ? (*j)["object"].dump() : "missing") +
                ", expected \"" + object + "\"";
    return c;
  }
  if (!j->contains("choices") || !(*j)["choices"].is_array() || (*j)["choices"].empty()) {
    c.message = what + ": no choices";
    return c;
  }
  const Json& choice = (*j)["choices"][0];
  if (id == "api.completions") {
    if (!choice.is_object() || !choice.contains("text") || !choice["text"].is_string()) {
      c.message = what + ": choices[0].text is missing or not a string";
      return c;
    }
  } else if (!choice.is_object() || !choice.contains("message") || !choice["message"].is_object()) {
    c.message = what + ": choices[0].message is missing or not an object";
    return c;
  }
  c.status = CheckStatus::kPass;
  c.message = std::string(object) + " from " + model + UsageText(*j);
  return c;
}

CheckResult JudgeStream(const absl::StatusOr<HttpResponse>& r) {
  CheckResult c{"api.stream", CheckStatus::kFail, ""};
  const std::string what = "POST /v1/chat/completions (stream)";
  if (!r.ok()) {
    c.message = std::string(r.status().message());
    return c;
  }
  if (r->status != 200) {
    c.message = what + ": HTTP " + std::to_string(r->status) + ": " + internal::BodySnippet(r->body);
    return c;
  }
  std::istringstream in(r->body);
  std::string line;
  int chunks = 0;
  std::string last;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("data:", 0) != 0) continue;
    std::string data = line.substr(5);
    if (!data.empty() && data[0] == ' ') data.erase(0, 1);
    last = data;
    if (data == "[DONE]") continue;
    Json j = Json::parse(data, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      c.message = what + ": chunk " + std::to_string(chunks + 1) + " is not JSON: " + internal::BodySnippet(data);
      return c;
    }
    if (!j.contains("object") || j["object"] != "chat.completion.chunk") {
      c.message = what + ": chunk " + std::to_string(chunks + 1) + " object is not \"chat.completion.chunk\"";
      return c;
    }
    ++chunks;
  }
  if (chunks == 0) {
    c.message = what + ": no SSE 'data:' chunks in the answer (content-type " + r->content_type + ")";
    return c;
  }
  if (last != "[DONE]") {
    c.message = what + ": stream did not end with 'data: [DONE]'";
    return c;
  }
  c.status = CheckStatus::kPass;
  c.message = std::to_string(chunks) + " SSE chunks, ended with [DONE]";
  return c;
}

void Finalize(TargetReport& rep) {
  rep.status = CheckStatus::kPass;
  for (const CheckResult& c : rep.checks) rep.status = WorseStatus(rep.status, c.status);
}

}  // namespace

absl::StatusOr<CheckReport> RunChecks(std::span<const std::string> targets, const CheckOptions& raw_options) {
  CheckOptions options = raw_options;
  EPP_RETURN_IF_ERROR(NormalizeScrapeOptions(options));
  if (targets.empty()) return absl::InvalidArgumentError("no targets given");
  for (const std::string& t : targets) {
    if (!IsUrl(t) && t.find("://") != std::string::npos) {
      return absl::InvalidArgumentError("target '" + t + "': only http:// and https:// URLs or file paths");
    }
  }
  EPP_ASSIGN_OR_RETURN(const MetricMappings mappings, MetricMappings::Create(options));

  CheckReport report;
  report.targets.resize(targets.size());
  std::vector<double> wall(targets.size(), 0);
  std::vector<HttpRequest> round1;
  std::vector<Pending> pending1;
  for (size_t i = 0; i < targets.size(); ++i) {
    TargetReport& rep = report.targets[i];
    rep.target = targets[i];
    if (!IsUrl(targets[i])) {
      auto start = std::chrono::steady_clock::now();
      std::ifstream in(targets[i], std::ios::binary);
      if (!in) {
        rep.checks.push_back({"metrics.reachable", CheckStatus::kFail, "cannot read file " + targets[i]});
        SkipMetricChecks(rep, "metrics.parse", "metrics unavailable");
      } else {
        std::stringstream ss;
        ss << in.rdbuf();
        std::string text = ss.str();
        rep.checks.push_back({"metrics.reachable", CheckStatus::kPass,
                              "file, " + std::to_string(text.size()) + " bytes"});
        CheckMetricsText(text, options, mappings, rep);
      }
      for (const char* id : {"api.models", "api.completions", "api.chat", "api.stream"}) {
        rep.checks.push_back({id, CheckStatus::kSkip, "target is a file"});
      }
      wall[i] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      continue;
    }
    const std::string base = TrimSlash(targets[i]);
    round1.push_back(MakeRequest(options, base + options.metrics_path));
    pending1.push_back({i, "metrics"});
    if (options.api) {
      round1.push_back(MakeRequest(options, base + "/v1/models"));
      pending1.push_back({i, "api.models"});
    }
  }
  auto results1 = HttpFetchAll(round1);
  std::vector<std::vector<std::string>> models(targets.size());
  std::vector<double> round1_ms(targets.size(), 0);
  for (size_t k = 0; k < results1.size(); ++k) {
    const size_t i = pending1[k].target;
    TargetReport& rep = report.targets[i];
    const auto& r = results1[k];
    if (r.ok()) round1_ms[i] = std::max(round1_ms[i], r->elapsed_ms);
    else round1_ms[i] = std::max(round1_ms[i], static_cast<double>(options.timeout.count()));
    if (pending1[k].check_id == "metrics") {
      if (!r.ok() || r->status != 200) {
        rep.checks.push_back({"metrics.reachable", CheckStatus::kFail,
                              r.ok() ? "GET " + round1[k].url + ": HTTP " + std::to_string(r->status) + ": " + internal::BodySnippet(r->body)
                                     : std::string(r.status().message())});
        SkipMetricChecks(rep, "metrics.parse", "metrics unavailable");
        continue;
      }
      char ms[32];
      std::snprintf(ms, sizeof ms, "%.1f", r->elapsed_ms);
      rep.checks.push_back({"metrics.reachable", CheckStatus::kPass,
                            "HTTP 200, " + std::to_string(r->body.size()) + " bytes in " + ms + " ms"});
      CheckMetricsText(r->body, options, mappings, rep);
    } else {
      rep.checks.push_back(JudgeModels(r, models[i]));
    }
  }
  std::vector<HttpRequest> round2;
  std::vector<Pending> pending2;
  std::vector<std::string> chosen(targets.size());
  for (size_t i = 0; i < targets.size() && options.api; ++i) {
    if (!IsUrl(targets[i])) continue;
    TargetReport& rep = report.targets[i];
    std::string model = !options.model.empty() ? options.model : (models[i].empty() ? "" : models[i][0]);
    if (model.empty()) {
      for (const char* id : {"api.completions", "api.chat", "api.stream"}) {
        rep.checks.push_back({id, CheckStatus::kSkip, "no model known (api.models failed; pass --model)"});
      }
      continue;
    }
    chosen[i] = model;
    const std::string base = TrimSlash(targets[i]);
    Json comp = {{"model", model}, {"prompt", "Say OK."}, {"max_tokens", 1}};
    Json chat = {{"model", model},
                 {"messages", Json::array({Json{{"role", "user"}, {"content", "Say OK."}}})},
                 {"max_tokens", 1}};
    Json stream = chat;
    stream["stream"] = true;
    stream["max_tokens"] = 2;
    round2.push_back(MakeRequest(options, base + "/v1/completions", "POST", comp.dump()));
    pending2.push_back({i, "api.completions"});
    round2.push_back(MakeRequest(options, base + "/v1/chat/completions", "POST", chat.dump()));
    pending2.push_back({i, "api.chat"});
    round2.push_back(MakeRequest(options, base + "/v1/chat/completions", "POST", stream.dump()));
    pending2.push_back({i, "api.stream"});
  }
  auto results2 = HttpFetchAll(round2);
  std::vector<double> round2_ms(targets.size(), 0);
  for (size_t k = 0; k < results2.size(); ++k) {
    const size_t i = pending2[k].target;
    const auto& r = results2[k];
    round2_ms[i] = std::max(round2_ms[i], r.ok() ? r->elapsed_ms : static_cast<double>(options.timeout.count()));
    const std::string& id = pending2[k].check_id;
    if (id == "api.completions") report.targets[i].checks.push_back(JudgeCompletion(r, id, "text_completion", chosen[i]));
    else if (id == "api.chat") report.targets[i].checks.push_back(JudgeCompletion(r, id, "chat.completion", chosen[i]));
    else report.targets[i].checks.push_back(JudgeStream(r));
  }
  report.status = CheckStatus::kPass;
  for (size_t i = 0; i < targets.size(); ++i) {
    TargetReport& rep = report.targets[i];
    if (IsUrl(targets[i])) rep.elapsed_ms = round1_ms[i] + round2_ms[i];
    else rep.elapsed_ms = wall[i];
    Finalize(rep);
    report.status = WorseStatus(report.status, rep.status);
  }
  if (report.status == CheckStatus::kSkip) report.status = CheckStatus::kPass;
  return report;
}

std::string CheckReportToJson(const CheckReport& report, int indent) {
  Json root;
  root["status"] = std::string(CheckStatusName(report.status));
  Json targets = Json::array();
  auto opt = [](const auto& v) -> Json { return v ? Json(*v) : Json(nullptr); };
  for (const TargetReport& t : report.targets) {
    Json jt;
    jt["target"] = t.target;
    jt["engine"] = t.engine ? Json(*t.engine) : Json(nullptr);
    jt["status"] = std::string(CheckStatusName(t.status));
    Json m;
    m["waiting_queue_size"] = opt(t.metrics.waiting_queue_size);
    m["running_requests"] = opt(t.metrics.running_requests);
    m["kv_cache_usage"] = opt(t.metrics.kv_cache_usage);
    if (t.metrics.lora) {
      m["lora"] = {{"max_lora", t.metrics.lora->max_lora},
                   {"running", t.metrics.lora->running},
                   {"waiting", t.metrics.lora->waiting},
                   {"slots_in_use", t.metrics.lora->SlotsInUse()}};
      if (!t.metrics.lora->loaded.empty() || !t.metrics.lora->loaded_cpu.empty()) {
        m["lora"]["loaded"] = t.metrics.lora->loaded;
        m["lora"]["loaded_cpu"] = t.metrics.lora->loaded_cpu;
      }
    } else {
      m["lora"] = nullptr;
    }
    m["cache_block_size"] = opt(t.metrics.cache_block_size);
    m["cache_num_blocks"] = opt(t.metrics.cache_num_blocks);
    // customMetrics attributes, present only when a mapping declares some (the schema of older
    // outputs is unchanged).
    if (!t.metrics.custom.empty()) {
      Json attrs = Json::object();
      for (const auto& [key, value] : t.metrics.custom) attrs[key] = value;
      m["attributes"] = std::move(attrs);
    }
    jt["metrics"] = std::move(m);
    Json checks = Json::array();
    for (const CheckResult& c : t.checks) {
      checks.push_back({{"id", c.id}, {"status", std::string(CheckStatusName(c.status))}, {"message", c.message}});
    }
    jt["checks"] = std::move(checks);
    jt["elapsed_ms"] = t.elapsed_ms;
    targets.push_back(std::move(jt));
  }
  root["targets"] = std::move(targets);
  return root.dump(indent, ' ', false, Json::error_handler_t::replace);
}

}  // namespace epp
