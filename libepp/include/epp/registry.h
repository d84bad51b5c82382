// PluginRegistry: plugin type string -> factory.
//
// The registry is a value, never a global: RegisterBuiltinPlugins() fills one with every in-tree
// plugin (the one list, in src/plugins/registry.cc), tests may register fakes, and pyepp adds
// factories for scorers and filters written in Python. Not thread-safe for Register; Create may
// run concurrently once registration is over.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "epp/param_table.h"
#include "epp/params.h"
#include "epp/plugin.h"
#include "epp/status.h"

namespace epp {

// Builds a plugin from its name and parameters. Fails with kInvalidArgument naming the
// parameter's config path when a parameter is wrong or unknown.
using PluginFactory = std::function<absl::StatusOr<std::unique_ptr<Plugin>>(
    const std::string& name, const Params& params, const PluginContext& context)>;

class PluginRegistry {
 public:
  // kAlreadyExists when `type` is registered; kInvalidArgument for an empty type or factory.
  // `schema` describes the type's parameters (a ParamTable's Schema()); a type registered
  // without one (a Python plugin, a test's fake) reports `declared: false`.
  absl::Status Register(std::string type, PluginFactory factory, PluginSchema schema = {});
  bool Has(std::string_view type) const;
  // The type's declared parameters; nullptr for an unknown type.
  const PluginSchema* Schema(std::string_view type) const;
  // kNotFound listing the known types when `type` is not registered; the factory's error,
  // prefixed "failed to create plugin 'NAME' (type: TYPE): ", when it fails.
  absl::StatusOr<std::unique_ptr<Plugin>> Create(const std::string& type, const std::string& name,
                                                  const Params& params, const PluginContext& context) const;
  std::vector<std::string> Types() const;  // sorted

 private:
  struct Entry {
    PluginFactory factory;
    PluginSchema schema;
  };
  std::map<std::string, Entry, std::less<>> factories_;
};

// Registers every built-in plugin type (docs/scheduling.md lists them with their parameters).
void RegisterBuiltinPlugins(PluginRegistry& registry);

// A registry holding the built-ins.
PluginRegistry BuiltinRegistry();

// Every type of `registry` with its parameters as Markdown: the generated part of
// docs/plugin-parameters.md (`eppctl config plugins --markdown`).
std::string PluginParametersMarkdown(const PluginRegistry& registry);

}  // namespace epp
