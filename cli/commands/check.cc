#include "commands/check.h"

#include <cstdio>
#include <iostream>
#include <memory>

#include "epp/tools/check.h"
#include "output.h"

namespace eppctl {
namespace {

std::string Mark(epp::CheckStatus s, bool color) {
  const char* text = "";
  const char* code = "";
  switch (s) {
    case epp::CheckStatus::kPass: text = "pass"; code = "\033[32m"; break;
    case epp::CheckStatus::kWarn: text = "warn"; code = "\033[33m"; break;
    case epp::CheckStatus::kFail: text = "FAIL"; code = "\033[31;1m"; break;
    case epp::CheckStatus::kSkip: text = "skip"; code = "\033[2m"; break;
  }
  return color ? std::string(code) + text + "\033[0m" : std::string(text);
}

std::string Fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

void PrintText(const epp::CheckReport& report, bool color) {
  int counts[4] = {0, 0, 0, 0};
  for (const epp::TargetReport& t : report.targets) {
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.1f ms", t.elapsed_ms);
    std::cout << t.target << "  engine " << (t.engine ? *t.engine : "-") << "  " << Mark(t.status, color) << "  ("
              << ms << ")\n";
    for (const epp::CheckResult& c : t.checks) {
      std::string id = c.id;
      id.resize(19, ' ');
      std::cout << "  " << Mark(c.status, color) << "  " << id << c.message << "\n";
    }
    const epp::EndpointMetrics& m = t.metrics;
    auto opt = [](const std::optional<double>& v) { return v ? Fmt(*v) : std::string("-"); };
    std::cout << "  => queue " << opt(m.waiting_queue_size) << ", running " << opt(m.running_requests) << ", kv "
              << opt(m.kv_cache_usage);
    if (m.lora) std::cout << ", lora max " << m.lora->max_lora << " running " << m.lora->running.size();
    if (m.cache_block_size) std::cout << ", cache " << *m.cache_num_blocks << " blocks x " << *m.cache_block_size << " tokens";
    std::cout << "\n\n";
    counts[static_cast<int>(t.status)]++;
  }
  std::cout << report.targets.size() << " target" << (report.targets.size() == 1 ? "" : "s") << ": "
            << counts[static_cast<int>(epp::CheckStatus::kPass)] + counts[static_cast<int>(epp::CheckStatus::kSkip)]
            << " pass, " << counts[static_cast<int>(epp::CheckStatus::kWarn)] << " warn, "
            << counts[static_cast<int>(epp::CheckStatus::kFail)] << " fail => " << Mark(report.status, color) << "\n";
}

}  // namespace

void SetupCheckCommand(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<CheckCommandOptions>();
  CLI::App* cmd = app.add_subcommand("check", "Validate model servers (URLs) or captured /metrics files for an EPP");
  cmd->add_option("targets", opts->targets, "Base URLs (http://host:port) or metrics files")->required();
  cmd->add_option("--engine", opts->engine,
                  "auto, vllm, sglang, trtllm-serve, triton-tensorrt-llm or a name from --metrics-config")
      ->capture_default_str();
  cmd->add_option("--metric", opts->metrics,
                  "Override one metric: FIELD=SPEC, FIELD one of queue, running, kv, lora, cache-info, "
                  "cache-block-size, cache-num-blocks (repeatable)");
  cmd->add_option("--metrics-config", opts->metrics_config,
                  "YAML engine mappings (GIE core-metrics-extractor engineConfigs)");
  cmd->add_option("--metrics-path", opts->metrics_path, "Metrics path on URL targets")->capture_default_str();
  cmd->add_option("--timeout", opts->timeout_s, "Per-request timeout in seconds")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--insecure", opts->insecure, "Skip TLS certificate verification");
  cmd->add_option("--bearer-token-file", opts->bearer_token_file, "File holding a bearer token");
  cmd->add_option("--header", opts->headers, "Extra request header K:V (repeatable)");
  cmd->add_option("--model", opts->model, "Model for API probes (default: first of /v1/models)");
  cmd->add_flag("--lenient", opts->lenient, "Skip malformed metric lines instead of failing");
  cmd->add_flag("--no-api", opts->no_api, "Do not probe the OpenAI APIs");
  cmd->add_option("--output,-o", opts->output, "text or json")->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->callback([opts, &exit_code] { exit_code = RunCheck(*opts); });
}

int RunCheck(const CheckCommandOptions& o) {
  epp::CheckOptions options;
  options.engine = o.engine;
  options.metrics_path = o.metrics_path;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  options.insecure = o.insecure;
  options.model = o.model;
  options.lenient = o.lenient;
  options.api = !o.no_api;
  for (const std::string& m : o.metrics) {
    size_t eq = m.find('=');
    if (eq == std::string::npos) {
      return PrintError(absl::InvalidArgumentError("--metric '" + m + "': expected FIELD=SPEC"));
    }
    options.metric_overrides.emplace_back(m.substr(0, eq), m.substr(eq + 1));
  }
  options.headers = o.headers;
  if (!o.bearer_token_file.empty()) {
    auto token = ReadFile(o.bearer_token_file);
    if (!token.ok()) return PrintError(absl::InvalidArgumentError("--bearer-token-file: " + std::string(token.status().message())));
    options.bearer_token = *token;
    if (options.bearer_token.empty()) {
      return PrintError(absl::InvalidArgumentError("--bearer-token-file " + o.bearer_token_file + " is empty"));
    }
  }
  if (!o.metrics_config.empty()) {
    auto text = ReadFile(o.metrics_config);
    if (!text.ok()) return PrintError(absl::InvalidArgumentError("--metrics-config: " + std::string(text.status().message())));
    auto mappings = epp::LoadMetricMappingsYaml(*text, o.metrics_config);
    if (!mappings.ok()) return PrintError(mappings.status());
    options.custom_mappings = *std::move(mappings);
  }
  auto report = epp::RunChecks(o.targets, options);
  if (!report.ok()) return PrintError(report.status());
  if (o.output == "json") {
    std::cout << epp::CheckReportToJson(*report) << "\n";
  } else {
    PrintText(*report, UseColor());
  }
  return report->status == epp::CheckStatus::kFail ? kExitFailure : kExitOk;
}

}  // namespace eppctl
