#include "commands/config.h"

#include <chrono>
#include <iostream>
#include <memory>

#include "epp/config.h"
#include "epp/runtime/endpoints.h"
#include "epp/metrics.h"
#include "epp/registry.h"
#include "epp/scheduler.h"
#include "output.h"

namespace eppctl {
namespace {

// Loads and builds; the scheduler proves every plugin was created and every rule holds.
absl::StatusOr<std::unique_ptr<epp::Scheduler>> Build(const std::string& file) {
  epp::EppConfig config = epp::DefaultConfig();
  if (!file.empty()) {
    EPP_ASSIGN_OR_RETURN(config, epp::LoadConfigFile(file));
  }
  return epp::BuildScheduler(config, epp::BuiltinRegistry());
}

}  // namespace

void SetupConfigCommand(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand("config", "Validate EndpointPickerConfig files and show them after defaults");
  cmd->require_subcommand(1);

  struct ValidateOptions {
    std::string file;
    std::string engine;                  // check the plugins' inputs against this engine's mapping
    std::vector<std::string> endpoints;  // ADDR[=METRICS]: check them against what these expose
    std::string endpoints_file;
    double timeout_s = 2.0;
  };
  auto vo = std::make_shared<ValidateOptions>();
  CLI::App* validate = cmd->add_subcommand("validate", "Load FILE as the EPP would; exit 0 when valid, 2 otherwise");
  validate->add_option("file", vo->file, "EndpointPickerConfig YAML")->required();
  validate->add_option("--engine", vo->engine,
                       "Warn about plugins that read a metric this engine does not expose (vllm, sglang, trtllm-serve, "
                       "triton-tensorrt-llm)");
  validate->add_option("--endpoint,-e", vo->endpoints,
                       "ADDR[=METRICS]: read these endpoints' metrics and warn about plugins that read a metric none of "
                       "them has; repeatable");
  validate->add_option("--endpoints", vo->endpoints_file, "Endpoints file to read and check likewise");
  validate->add_option("--timeout", vo->timeout_s, "Seconds per metrics read")->capture_default_str();
  validate->callback([vo, &exit_code] {
    auto s = Build(vo->file);
    if (!s.ok()) {
      exit_code = PrintError(s.status());
      return;
    }
    for (const std::string& w : (*s)->warnings()) std::cerr << "warning: " << w << "\n";
    std::vector<epp::MissingInput> missing;
    if (!vo->engine.empty()) {
      absl::StatusOr<epp::MetricMapping> mapping = epp::ResolveMapping(vo->engine, epp::ScrapeOptions());
      if (!mapping.ok()) {
        exit_code = PrintError(absl::Status(mapping.status().code(), "--engine: " + std::string(mapping.status().message())));
        return;
      }
      missing = (*s)->MissingInputs(*mapping);
    }
    if (!vo->endpoints.empty() || !vo->endpoints_file.empty()) {
      std::vector<epp::EndpointSpec> specs;
      if (!vo->endpoints_file.empty()) {
        auto loaded = epp::LoadEndpointsFile(vo->endpoints_file);
        if (!loaded.ok()) {
          exit_code = PrintError(loaded.status());
          return;
        }
        specs = *std::move(loaded);
      }
      for (size_t i = 0; i < vo->endpoints.size(); ++i) {
        auto spec = epp::ParseEndpointFlag(vo->endpoints[i], static_cast<int>(i + 1));
        if (!spec.ok()) {
          exit_code = PrintError(spec.status());
          return;
        }
        specs.push_back(*std::move(spec));
      }
      epp::ResolveOptions ro;
      ro.scrape.timeout = std::chrono::milliseconds(static_cast<int64_t>(vo->timeout_s * 1000));
      auto endpoints = epp::ResolveEndpoints(specs, ro);
      if (!endpoints.ok()) {
        exit_code = PrintError(endpoints.status());
        return;
      }
      for (const epp::Endpoint& e : *endpoints)
        if (!e.metrics_error.empty()) std::cerr << "warning: " << e.metrics_error << "\n";
      for (epp::MissingInput& m : (*s)->MissingInputs(*endpoints)) missing.push_back(std::move(m));
    }
    for (const epp::MissingInput& m : missing) std::cerr << "warning: " << m.ToString() << "\n";
    std::cout << vo->file << ": valid (profiles: ";
    const auto names = (*s)->ProfileNames();
    for (size_t i = 0; i < names.size(); ++i) std::cout << (i ? ", " : "") << names[i];
    std::cout << ")" << (missing.empty() ? "" : "; " + std::to_string(missing.size()) + " input warning(s)") << "\n";
    exit_code = kExitOk;
  });

  auto efile = std::make_shared<std::string>();
  CLI::App* effective = cmd->add_subcommand("effective", "Print the configuration after defaults (GIE's default when no FILE)");
  effective->add_option("file", *efile, "EndpointPickerConfig YAML");
  effective->callback([efile, &exit_code] {
    auto s = Build(*efile);
    if (!s.ok()) {
      exit_code = PrintError(s.status());
      return;
    }
    for (const std::string& w : (*s)->warnings()) std::cerr << "warning: " << w << "\n";
    std::cout << (*s)->EffectiveConfigYaml();
    exit_code = kExitOk;
  });

  struct PluginsOptions {
    std::vector<std::string> types;  // empty: all
    bool json = false;
    bool markdown = false;
  };
  auto po = std::make_shared<PluginsOptions>();
  CLI::App* plugins = cmd->add_subcommand("plugins", "List the plugin types epp implements with their parameters");
  plugins->add_option("type", po->types, "Only these types");
  CLI::Option* json = plugins->add_flag("--json", po->json, "One JSON object: each type's declared parameters");
  plugins->add_flag("--markdown", po->markdown, "Markdown, as docs/plugin-parameters.md holds it (all types)")->excludes(json);
  plugins->callback([po, &exit_code] {
    const epp::PluginRegistry registry = epp::BuiltinRegistry();
    if (po->markdown) {
      std::cout << epp::PluginParametersMarkdown(registry);
      exit_code = kExitOk;
      return;
    }
    std::vector<std::string> types = po->types.empty() ? registry.Types() : po->types;
    for (const std::string& t : types) {
      if (!registry.Has(t)) {
        exit_code = PrintError(absl::NotFoundError("unknown plugin type '" + t + "'"));
        return;
      }
    }
    if (po->json) {
      epp::Params doc = epp::Params::Map();
      for (const std::string& t : types) doc.Set(t, registry.Schema(t)->ToParams());
      std::cout << doc.ToJson() << "\n";
      exit_code = kExitOk;
      return;
    }
    // The type on its own line (so `cut`/`grep -v '^ '` still list the types), its parameters
    // indented below it.
    for (const std::string& t : types) {
      std::cout << t << "\n";
      const epp::PluginSchema& s = *registry.Schema(t);
      if (!s.declared) std::cout << "  (parameters not declared)\n";
      for (const epp::ParamInfo& p : s.params) {
        std::cout << "  " << p.name << " (" << epp::ParamTypeName(p.type);
        if (!p.default_text.empty()) std::cout << ", default " << p.default_text;
        if (!p.choices.empty()) {
          std::cout << ", one of";
          for (size_t i = 0; i < p.choices.size(); ++i) std::cout << (i ? ", " : " ") << p.choices[i];
        } else if (p.range.bounded()) {
          std::cout << ", " << p.RangeText();
        }
        for (const std::string& a : p.aliases) std::cout << "; also " << a;
        if (p.deprecated) std::cout << "; deprecated";
        std::cout << "): " << p.doc << "\n";
      }
      if (!s.other_keys.empty()) std::cout << "  (other keys: " << s.other_keys << ")\n";
    }
    exit_code = kExitOk;
  });
}

}  // namespace eppctl
