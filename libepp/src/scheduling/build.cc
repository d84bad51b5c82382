// BuildScheduler: GIE's defaulting rules (pkg/epp/config/loader/defaults.go), plugin
// instantiation and validation, and the effective configuration document.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/strings.h"
#include "epp/config.h"
#include "epp/scheduler.h"
#include "plugins/plugins.h"
#include "scheduling/scheduler_impl.h"

namespace epp {
namespace {

std::string Where(const EppConfig& c, int line, const std::string& path) {
  std::string s = c.source.empty() ? "<config>" : c.source;
  if (line > 0) absl::StrAppend(&s, ":", line);
  if (!path.empty()) absl::StrAppend(&s, ": ", path);
  return s;
}

absl::Status Err(const EppConfig& c, int line, const std::string& path, std::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat(Where(c, line, path), ": ", ToAbsl(msg)));
}

// A plugin that reads a prefix producer's match data needs one in the scheduler.
bool NeedsPrefix(const Plugin& p) { return p.Consumes().has(PluginInput::kPrefixMatch); }

// YAML for the effective configuration (block style; scalars quoted when plain style would
// change their meaning).
bool PlainSafe(const std::string& s) {
  if (s.empty()) return false;
  static const std::string kSpecialStart = "-?:,[]{}#&*!|>'\"%@` ";
  if (kSpecialStart.find(s.front()) != std::string::npos || s.back() == ' ') return false;
  for (char c : s)
    if (c == '\n' || c == '\t' || c == '#' || c == ':' || static_cast<unsigned char>(c) < 0x20) return false;
  static const std::set<std::string> kReserved = {"true", "false", "null", "~", "yes", "no", "on", "off", "True", "False", "Null"};
  return kReserved.count(s) == 0;
}

// True when plain style would not change the scalar's text (reserved words allowed).
bool PlainSyntaxSafe(const std::string& s) {
  if (s.empty()) return false;
  static const std::string kSpecialStart = "-?:,[]{}#&*!|>'\"%@` ";
  if (kSpecialStart.find(s.front()) != std::string::npos && !(s.front() == '-' && s.size() > 1 && std::isdigit(static_cast<unsigned char>(s[1]))))
    return false;
  if (s.back() == ' ') return false;
  for (char c : s)
    if (c == '\n' || c == '\t' || c == '#' || c == ':' || static_cast<unsigned char>(c) < 0x20) return false;
  return true;
}

// A plain scalar YAML would read as a number (so a string spelled so must be quoted).
bool LooksTyped(const std::string& s) {
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end && *end == '\0' && !s.empty();
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// Strings (quoted in the source, or built with Params::String) stay strings: quoted when plain
// style would read back as something else. Unquoted scalars (numbers, booleans, plain words)
// are written plain, so `autoTune: true` stays a boolean for every YAML reader.
std::string ScalarYaml(const Params& p) {
  if (p.is_null()) return "null";
  if (p.quoted()) return PlainSafe(p.text()) && !LooksTyped(p.text()) ? p.text() : Quote(p.text());
  return PlainSyntaxSafe(p.text()) ? p.text() : Quote(p.text());
}

void EmitYaml(const Params& p, int indent, std::string& out);

void EmitValueAfterKey(const Params& v, int indent, std::string& out) {
  if (v.kind() == Params::Kind::kMap && !v.entries().empty()) {
    out += "\n";
    EmitYaml(v, indent + 2, out);
  } else if (v.kind() == Params::Kind::kList && !v.items().empty()) {
    out += "\n";
    EmitYaml(v, indent, out);
  } else if (v.kind() == Params::Kind::kMap) {
    out += " {}\n";
  } else if (v.kind() == Params::Kind::kList) {
    out += " []\n";
  } else {
    out += " " + ScalarYaml(v) + "\n";
  }
}

void EmitYaml(const Params& p, int indent, std::string& out) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  if (p.kind() == Params::Kind::kMap) {
    for (const auto& [k, v] : p.entries()) {
      out += pad + (PlainSafe(k) ? k : Quote(k)) + ":";
      EmitValueAfterKey(v, indent, out);
    }
  } else if (p.kind() == Params::Kind::kList) {
    for (const Params& item : p.items()) {
      if (item.kind() == Params::Kind::kMap && !item.entries().empty()) {
        // "- first: x" then the rest of the map indented under it.
        std::string sub;
        EmitYaml(item, indent + 2, sub);
        sub.replace(static_cast<size_t>(indent), 2, "- ");
        out += sub;
      } else {
        out += pad + "-";
        EmitValueAfterKey(item, indent, out);
      }
    }
  } else {
    out += pad + ScalarYaml(p) + "\n";
  }
}


// The effective parameters as text: what decides whether a plugin carries over a reload.
std::string ParamsKey(const Plugin& p) {
  std::string out;
  EmitYaml(p.EffectiveParams(), 0, out);
  return out;
}

absl::StatusOr<std::unique_ptr<Scheduler>> Build(const EppConfig& input, const PluginRegistry& registry,
                                                 const PluginContext& context, const Scheduler::Impl* previous) {
  EppConfig c = input;
  if (c.plugins.empty() && c.profiles.empty()) {
    EppConfig d = DefaultConfig();
    c.plugins = d.plugins;
    c.profiles = d.profiles;
    c.warnings.push_back("no plugins or profiles configured: using GIE's default profile (queue 2, kv-cache 2, prefix 3)");
  }
  auto impl = std::make_unique<Scheduler::Impl>();
  impl->warnings = c.warnings;
  impl->clock = context.clock ? context.clock : &SteadyClock::Get();
  if (context.rng) {
    impl->rng = context.rng;
  } else {
    impl->owned_rng = std::make_unique<SeededRng>(0);
    impl->rng = impl->owned_rng.get();
  }
  PluginContext pctx{impl->clock, impl->rng};

  // Every unsupported type at once, so a production config shows its whole gap in one run.
  std::vector<std::string> unsupported;
  for (const PluginSpec& s : c.plugins)
    if (!registry.Has(s.type)) unsupported.push_back(absl::StrCat(s.type, " (", s.path.empty() ? s.name : s.path, ")"));
  if (!unsupported.empty())
    return absl::InvalidArgumentError(absl::StrCat(c.source.empty() ? "<config>" : c.source,
                                                   ": unsupported plugin types: ", absl::StrJoin(unsupported, ", "),
                                                   "; known types: ", absl::StrJoin(registry.Types(), ", ")));

  std::map<std::string, const Plugin*> by_name;
  std::vector<std::string> order;
  if (previous != nullptr) impl->load = previous->load;
  auto add_plugin = [&](std::unique_ptr<Plugin> created) -> const Plugin* {
    std::shared_ptr<Plugin> p = std::move(created);
    // A reload keeps the previous instance (and its state) when nothing about it changed.
    if (previous != nullptr) {
      for (const std::shared_ptr<Plugin>& old : previous->plugins) {
        if (old->name() == p->name() && old->type() == p->type() && ParamsKey(*old) == ParamsKey(*p)) {
          p = old;
          break;
        }
      }
    }
    const Plugin* raw = p.get();
    by_name[p->name()] = raw;
    order.push_back(p->name());
    impl->plugins.push_back(std::move(p));
    return raw;
  };
  for (const PluginSpec& s : c.plugins) {
    if (by_name.count(s.name)) return Err(c, s.line, s.path, absl::StrCat("duplicate plugin name '", s.name, "'"));
    Params params = s.parameters;
    if (params.path().empty()) params.SetPath(s.path.empty() ? s.name : absl::StrCat(s.path, ".parameters"));
    absl::StatusOr<std::unique_ptr<Plugin>> p = registry.Create(s.type, s.name, params, pctx);
    if (!p.ok()) return absl::Status(p.status().code(), absl::StrCat(Where(c, s.line, ""), ": ", p.status().message()));
    add_plugin(std::move(*p));
  }

  // Rule 2: no profiles -> one `default` profile with every filter, scorer and picker.
  if (c.profiles.empty()) {
    ProfileSpec d;
    d.name = "default";
    for (const auto& p : impl->plugins)
      if (p->AsFilter() && !p->AsSaturationDetector()) d.plugins.push_back({p->name(), std::nullopt, "", 0});
    for (const auto& p : impl->plugins)
      if (p->AsScorer() || p->AsPicker()) d.plugins.push_back({p->name(), std::nullopt, "", 0});
    c.profiles.push_back(std::move(d));
  }

  // Rule 4: a shared picker for profiles without one: the first configured picker, else a new
  // max-score-picker.
  const Plugin* default_picker = nullptr;
  for (const auto& p : impl->plugins)
    if (p->AsPicker()) {
      default_picker = p.get();
      break;
    }

  std::set<std::string> profile_names;
  for (const ProfileSpec& ps : c.profiles) {
    if (ps.name.empty()) return Err(c, ps.line, ps.path, "profile has no name");
    if (!profile_names.insert(ps.name).second) return Err(c, ps.line, ps.path, absl::StrCat("duplicate profile name '", ps.name, "'"));
    Profile prof;
    prof.name = ps.name;
    for (const ProfilePluginRef& ref : ps.plugins) {
      auto it = by_name.find(ref.plugin_ref);
      if (it == by_name.end())
        return Err(c, ref.line, ref.path, absl::StrCat("references undefined plugin '", ref.plugin_ref, "'"));
      const Plugin* p = it->second;
      if (ref.weight && (!(*ref.weight >= 0) || std::isinf(*ref.weight)))
        return Err(c, ref.line, ref.path, "weight must be a finite number >= 0");
      if (const Scorer* s = p->AsScorer()) {
        prof.scorers.push_back({p, s, ref.weight.value_or(1.0)});  // rule 5: weight 1.0
        continue;
      }
      if (ref.weight)
        impl->warnings.push_back(absl::StrCat(Where(c, ref.line, ref.path), ": weight ignored: '", p->name(), "' is not a scorer"));
      if (const Picker* pk = p->AsPicker()) {
        if (prof.picker)
          return Err(c, ref.line, ref.path,
                     absl::StrCat("profile '", ps.name, "' has two pickers: '", prof.picker_plugin->name(), "' and '", p->name(), "'"));
        prof.picker = pk;
        prof.picker_plugin = p;
      } else if (const Filter* f = p->AsFilter()) {
        prof.filters.emplace_back(p, f);
      } else {
        return Err(c, ref.line, ref.path,
                   absl::StrCat("plugin '", p->name(), "' (type: ", p->type(),
                                ") is not a filter, scorer or picker and cannot be used in a profile"));
      }
    }
    if (!prof.picker) {
      if (!default_picker) {
        absl::StatusOr<std::unique_ptr<Plugin>> p =
            registry.Create(std::string(plugins::kMaxScorePickerType), std::string(plugins::kMaxScorePickerType), Params(), pctx);
        if (!p.ok()) return p.status();
        if (by_name.count((*p)->name())) return Err(c, ps.line, ps.path, "cannot add the default max-score-picker: the name is taken");
        default_picker = add_plugin(std::move(*p));
      }
      prof.picker = default_picker->AsPicker();
      prof.picker_plugin = default_picker;
    }
    impl->profiles.push_back(std::move(prof));
  }

  // Rule 3: one profile and no handler -> single-profile-handler.
  for (const auto& p : impl->plugins) {
    if (!p->AsProfileHandler()) continue;
    if (impl->handler)
      return Err(c, 0, "", absl::StrCat("two profile handlers: '", impl->handler_plugin->name(), "' and '", p->name(), "'"));
    impl->handler = p->AsProfileHandler();
    impl->handler_plugin = p.get();
  }
  if (!impl->handler) {
    if (impl->profiles.size() != 1)
      return Err(c, 0, "schedulingProfiles",
                 absl::StrCat(impl->profiles.size(), " profiles need a profile handler; epp implements single-profile-handler, which runs exactly one"));
    absl::StatusOr<std::unique_ptr<Plugin>> p = registry.Create(std::string(plugins::kSingleProfileHandlerType),
                                                                std::string(plugins::kSingleProfileHandlerType), Params(), pctx);
    if (!p.ok()) return p.status();
    const Plugin* raw = add_plugin(std::move(*p));
    impl->handler = raw->AsProfileHandler();
    impl->handler_plugin = raw;
  } else if (impl->handler_plugin->type() == plugins::kSingleProfileHandlerType && impl->profiles.size() != 1) {
    return Err(c, 0, "schedulingProfiles",
               absl::StrCat("single-profile-handler needs exactly one profile, the config has ", impl->profiles.size()));
  }

  // Rule 7: the saturation detector (default: a utilization-detector named so).
  if (!c.saturation_detector_ref.empty()) {
    auto it = by_name.find(c.saturation_detector_ref);
    if (it == by_name.end())
      return Err(c, 0, "saturationDetector.pluginRef", absl::StrCat("references undefined plugin '", c.saturation_detector_ref, "'"));
    if (!it->second->AsSaturationDetector())
      return Err(c, 0, "saturationDetector.pluginRef", absl::StrCat("plugin '", c.saturation_detector_ref, "' is not a saturation detector"));
    impl->detector = it->second->AsSaturationDetector();
    impl->detector_plugin = it->second;
  } else {
    auto it = by_name.find(std::string(plugins::kUtilizationDetectorType));
    if (it != by_name.end() && it->second->AsSaturationDetector() && c.saturation_detector_params.is_null()) {
      impl->detector = it->second->AsSaturationDetector();
      impl->detector_plugin = it->second;
    } else {
      Params params = c.saturation_detector_params;
      if (params.path().empty()) params.SetPath("saturationDetector");
      std::string name(plugins::kUtilizationDetectorType);
      if (by_name.count(name)) name = "default-utilization-detector";
      absl::StatusOr<std::unique_ptr<Plugin>> p =
          registry.Create(std::string(plugins::kUtilizationDetectorType), name, params, pctx);
      if (!p.ok()) return absl::InvalidArgumentError(absl::StrCat(Where(c, 0, ""), ": ", p.status().message()));
      const Plugin* raw = add_plugin(std::move(*p));
      impl->detector = raw->AsSaturationDetector();
      impl->detector_plugin = raw;
    }
  }

  // Rule 9: a prefix consumer without a producer gets the default approx-prefix-cache-producer.
  const Plugin* producer = nullptr;
  for (const auto& p : impl->plugins) {
    if (!p->AsDataProducer()) continue;
    if (producer)
      return Err(c, 0, "", absl::StrCat("two prefix producers: '", producer->name(), "' and '", p->name(), "'"));
    producer = p.get();
  }
  bool needs_prefix = false;
  for (const Profile& prof : impl->profiles) {
    for (const auto& f : prof.filters) needs_prefix |= NeedsPrefix(*f.first);
    for (const auto& s : prof.scorers) needs_prefix |= NeedsPrefix(*s.plugin);
  }
  if (needs_prefix && !producer) {
    absl::StatusOr<std::unique_ptr<Plugin>> p = registry.Create(std::string(plugins::kApproxPrefixProducerType),
                                                                std::string(plugins::kApproxPrefixProducerType), Params(), pctx);
    if (!p.ok()) return p.status();
    producer = add_plugin(std::move(*p));
  }
  // prefix-cache-scorer's prefixMatchInfoProducerName must name the producer in use.
  for (const auto& p : impl->plugins) {
    if (p->type() != plugins::kPrefixCacheScorerType) continue;
    const Params eff = p->EffectiveParams();
    if (const Params* ref = eff.Find("prefixMatchInfoProducerName"); ref && !ref->text().empty()) {
      if (!producer || producer->name() != ref->text())
        return Err(c, 0, "", absl::StrCat("plugin '", p->name(), "': prefixMatchInfoProducerName '", ref->text(),
                                          "' does not name an approx-prefix-cache-producer"));
    }
  }
  for (const auto& p : impl->plugins) {
    if (const DataProducer* d = p->AsDataProducer()) impl->producers.push_back(d);
    if (const RequestObserver* o = p->AsRequestObserver()) impl->observers.push_back(o);
  }

  // The effective document.
  Params doc = Params::Map();
  doc.Set("apiVersion", Params::String(c.api_version));
  doc.Set("kind", Params::String("EndpointPickerConfig"));
  if (!c.feature_gates.empty()) {
    Params gates = Params::List();
    for (const auto& g : c.feature_gates) gates.Append(Params::String(g));
    doc.Set("featureGates", std::move(gates));
  }
  Params plugin_list = Params::List();
  for (const auto& p : impl->plugins) {
    Params entry = Params::Map();
    entry.Set("name", Params::String(p->name()));
    entry.Set("type", Params::String(p->type()));
    Params eff = p->EffectiveParams();
    if (eff.kind() != Params::Kind::kMap || !eff.entries().empty()) entry.Set("parameters", std::move(eff));
    plugin_list.Append(std::move(entry));
  }
  doc.Set("plugins", std::move(plugin_list));
  Params profs = Params::List();
  for (const Profile& prof : impl->profiles) {
    Params entry = Params::Map();
    entry.Set("name", Params::String(prof.name));
    Params refs = Params::List();
    for (const auto& f : prof.filters) refs.Append(Params::Map().Set("pluginRef", Params::String(f.first->name())));
    for (const auto& s : prof.scorers) {
      Params r = Params::Map();
      r.Set("pluginRef", Params::String(s.plugin->name()));
      r.Set("weight", Params::Number(s.weight));
      refs.Append(std::move(r));
    }
    refs.Append(Params::Map().Set("pluginRef", Params::String(prof.picker_plugin->name())));
    entry.Set("plugins", std::move(refs));
    profs.Append(std::move(entry));
  }
  doc.Set("schedulingProfiles", std::move(profs));
  doc.Set("saturationDetector", Params::Map().Set("pluginRef", Params::String(impl->detector_plugin->name())));
  impl->effective = std::move(doc);

  return std::make_unique<Scheduler>(std::move(impl));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Scheduler>> BuildScheduler(const EppConfig& config, const PluginRegistry& registry,
                                                          const PluginContext& context) {
  return Build(config, registry, context, nullptr);
}

absl::StatusOr<std::unique_ptr<Scheduler>> RebuildScheduler(const EppConfig& config, const PluginRegistry& registry,
                                                            const PluginContext& context, const Scheduler& previous) {
  return Build(config, registry, context, &previous.impl());
}

std::string Scheduler::EffectiveConfigYaml() const {
  std::string out;
  EmitYaml(impl_->effective, 0, out);
  return out;
}

}  // namespace epp
