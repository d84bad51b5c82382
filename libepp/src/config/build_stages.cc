// The stages of BuildScheduler (build_stages.h lists them and the GIE rule each applies).
#include "config/build_stages.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/strings.h"
#include "config/params_yaml.h"
#include "plugins/plugins.h"

namespace epp::build {

BuildState::BuildState(EppConfig c, const PluginRegistry& r, const PluginContext& ctx, const Scheduler::Impl* prev)
    : config(std::move(c)), registry(r), previous(prev), impl(std::make_unique<Scheduler::Impl>()) {
  impl->warnings = config.warnings;
  impl->clock = ctx.clock ? ctx.clock : &SteadyClock::Get();
  impl->shared_prefix = ctx.shared_prefix;
  if (ctx.rng) {
    impl->rng = ctx.rng;
  } else {
    // Pickers need randomness for ties; a fixed seed keeps a scheduler built without one
    // reproducible.
    impl->owned_rng = std::make_unique<SeededRng>(0);
    impl->rng = impl->owned_rng.get();
  }
  // In-flight load is shared with the running scheduler: a request picked before a reload is
  // released after it, and must be subtracted from the same counters it was added to.
  if (previous != nullptr) impl->load = previous->load;
  context = PluginContext{impl->clock, impl->rng, &impl->warnings, ctx.region, ctx.zone, ctx.shared_prefix};
}

std::string BuildState::Where(int line, std::string_view path) const {
  std::string s = config.source.empty() ? "<config>" : config.source;
  if (line > 0) absl::StrAppend(&s, ":", line);
  if (!path.empty()) absl::StrAppend(&s, ": ", ToAbsl(path));
  return s;
}

absl::Status BuildState::Error(int line, std::string_view path, std::string_view message) const {
  return absl::InvalidArgumentError(absl::StrCat(Where(line, path), ": ", ToAbsl(message)));
}

const Plugin* BuildState::Add(std::unique_ptr<Plugin> created) {
  std::shared_ptr<Plugin> p = std::move(created);
  // A plugin with references points into this scheduler's plugins: never carried over.
  if (previous != nullptr && !p->HasReferences()) {
    // Parameters compare as their effective YAML, so a default written out explicitly in the
    // new file still counts as unchanged.
    const std::string key = ParamsYaml(p->EffectiveParams());
    for (const std::shared_ptr<Plugin>& old : previous->plugins) {
      if (old->name() == p->name() && old->type() == p->type() && ParamsYaml(old->EffectiveParams()) == key) {
        p = old;
        break;
      }
    }
  }
  const Plugin* raw = p.get();
  by_name[p->name()] = raw;
  impl->plugins.push_back(std::move(p));
  return raw;
}

absl::StatusOr<const Plugin*> BuildState::AddDefault(std::string_view type, std::string name, Params params) {
  absl::StatusOr<std::unique_ptr<Plugin>> p = registry.Create(std::string(type), std::move(name), params, context);
  if (!p.ok()) return p.status();
  return Add(std::move(*p));
}

EppConfig WithDefaultPlugins(EppConfig c) {
  if (!c.plugins.empty() || !c.profiles.empty()) return c;
  EppConfig d = DefaultConfig();
  c.plugins = d.plugins;
  c.profiles = d.profiles;
  c.warnings.push_back("no plugins or profiles configured: using GIE's default profile (queue 2, kv-cache 2, prefix 3)");
  return c;
}

absl::Status MoveLegacyPrefixScorerParams(EppConfig& c) {
  static const std::set<std::string> kProducerKeys = {"autoTune", "blockSize", "hashBlockSize", "blockSizeTokens",
                                                      "maxPrefixBlocksToMatch", "maxPrefixTokensToMatch", "lruCapacityPerServer"};
  const std::string where = c.source.empty() ? "<config>" : c.source;
  Params moved = Params::Map();
  std::string from;  // the first scorer that gave them
  for (PluginSpec& s : c.plugins) {
    if (s.type != plugins::kPrefixCacheScorerType || !s.parameters.is_map()) continue;
    Params kept = Params::Map(s.parameters.path());
    kept.set_line(s.parameters.line());
    Params mine = Params::Map();
    for (const auto& [k, v] : s.parameters.entries()) {
      if (!kProducerKeys.count(k)) {
        kept.Set(k, v);
        continue;
      }
      // hashBlockSize (characters) was renamed blockSize (GIE#1613).
      mine.Set(k == "hashBlockSize" ? "blockSize" : k, v);
    }
    if (mine.entries().empty()) continue;
    if (!from.empty() && ParamsYaml(mine) != ParamsYaml(moved))
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.path, ": prefix-cache-scorer hashing parameters differ from ",
                                                     from, "'s; one approx-prefix-cache-producer serves both"));
    if (from.empty()) {
      moved = std::move(mine);
      from = s.path.empty() ? s.name : s.path;
    }
    s.parameters = std::move(kept);
  }
  if (from.empty()) return absl::OkStatus();
  for (PluginSpec& s : c.plugins) {
    if (s.type != plugins::kApproxPrefixProducerType) continue;
    if (s.parameters.is_map() && !s.parameters.entries().empty())
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", from, ": hashing parameters on prefix-cache-scorer (the older form) ",
                                                     "and on ", s.path.empty() ? s.name : s.path,
                                                     " (approx-prefix-cache-producer): give them on the producer only"));
    moved.SetPath(s.path.empty() ? s.name : absl::StrCat(s.path, ".parameters"));
    s.parameters = std::move(moved);
    c.warnings.push_back(absl::StrCat(where, ": ", from, ": hashing parameters on prefix-cache-scorer are the older form; "
                                      "applied to approx-prefix-cache-producer '", s.name, "'"));
    return absl::OkStatus();
  }
  PluginSpec producer;
  producer.type = producer.name = std::string(plugins::kApproxPrefixProducerType);
  producer.path = absl::StrCat(from, " (moved)");
  moved.SetPath(absl::StrCat(from, ".parameters"));
  producer.parameters = std::move(moved);
  c.plugins.push_back(std::move(producer));
  c.warnings.push_back(absl::StrCat(where, ": ", from, ": hashing parameters on prefix-cache-scorer are the older form; "
                                    "moved to a new approx-prefix-cache-producer"));
  return absl::OkStatus();
}

absl::Status CheckPluginTypes(const EppConfig& c, const PluginRegistry& registry) {
  // Every unsupported type at once, so a production config shows its whole gap in one run; each
  // with its line and, when it looks like a typo of a known type, that type.
  std::vector<std::string> unsupported;
  int first_line = 0;
  const std::vector<std::string> known = registry.Types();
  for (const PluginSpec& s : c.plugins) {
    if (registry.Has(s.type)) continue;
    if (first_line == 0) first_line = s.line;
    std::string item = absl::StrCat(s.type, " (", s.path.empty() ? s.name : s.path);
    if (s.line > 0) absl::StrAppend(&item, ", line ", s.line);
    if (const std::string near = internal::Nearest(s.type, known); !near.empty())
      absl::StrAppend(&item, ": did you mean '", near, "'?");
    item += ")";
    unsupported.push_back(std::move(item));
  }
  if (unsupported.empty()) return absl::OkStatus();
  std::string where = c.source.empty() ? "<config>" : c.source;
  if (first_line > 0) absl::StrAppend(&where, ":", first_line);
  return absl::InvalidArgumentError(absl::StrCat(where, ": unsupported plugin types: ", absl::StrJoin(unsupported, ", "),
                                                 "; `eppctl config plugins` lists the ", known.size(), " known types"));
}

absl::Status CreatePlugins(BuildState& st) {
  for (const PluginSpec& s : st.config.plugins) {
    if (st.by_name.count(s.name)) return st.Error(s.line, s.path, absl::StrCat("duplicate plugin name '", s.name, "'"));
    Params params = s.parameters;
    // Parameter errors name the document path of the plugin's parameters.
    if (params.path().empty()) params.SetPath(s.path.empty() ? s.name : absl::StrCat(s.path, ".parameters"));
    absl::StatusOr<std::unique_ptr<Plugin>> p = st.registry.Create(s.type, s.name, params, st.context);
    if (!p.ok()) return absl::Status(p.status().code(), absl::StrCat(st.Where(s.line, ""), ": ", p.status().message()));
    st.Add(std::move(*p));
  }
  return absl::OkStatus();
}

void AddDefaultProfile(BuildState& st) {
  if (!st.config.profiles.empty()) return;
  ProfileSpec d;
  d.name = "default";
  // Filters first (a saturation detector may also be a filter; it is not part of a profile),
  // then scorers and pickers, each group in config order.
  for (const auto& p : st.impl->plugins)
    if (p->AsFilter() && !p->AsSaturationDetector() && !p->AsScorer()) d.plugins.push_back({p->name(), std::nullopt, "", 0});
  for (const auto& p : st.impl->plugins)
    if (p->AsScorer() || p->AsPicker()) d.plugins.push_back({p->name(), std::nullopt, "", 0});
  st.config.profiles.push_back(std::move(d));
}

absl::Status ResolveProfiles(BuildState& st) {
  // Rule 4: profiles without a picker share one: the first configured picker, else a new
  // max-score-picker (created once, on the first profile that needs it).
  const Plugin* default_picker = nullptr;
  for (const auto& p : st.impl->plugins)
    if (p->AsPicker()) {
      default_picker = p.get();
      break;
    }
  std::set<std::string> names;
  for (const ProfileSpec& ps : st.config.profiles) {
    if (ps.name.empty()) return st.Error(ps.line, ps.path, "profile has no name");
    if (!names.insert(ps.name).second) return st.Error(ps.line, ps.path, absl::StrCat("duplicate profile name '", ps.name, "'"));
    Profile prof;
    prof.name = ps.name;
    for (const ProfilePluginRef& ref : ps.plugins) {
      auto it = st.by_name.find(ref.plugin_ref);
      if (it == st.by_name.end())
        return st.Error(ref.line, ref.path, absl::StrCat("references undefined plugin '", ref.plugin_ref, "'"));
      const Plugin* p = it->second;
      if (ref.weight && (!(*ref.weight >= 0) || std::isinf(*ref.weight)))
        return st.Error(ref.line, ref.path, "weight must be a finite number >= 0");
      if (const Scorer* s = p->AsScorer()) {
        // A scorer that also filters (context-length-aware with enableFiltering) is both, as in
        // llm-d's profiles: its filter runs with the others, its score with the scorers.
        if (const Filter* f = p->AsFilter()) prof.filters.emplace_back(p, f);
        prof.scorers.push_back({p, s, ref.weight.value_or(1.0)});  // rule 5: weight 1.0
        continue;
      }
      if (ref.weight)
        st.impl->warnings.push_back(absl::StrCat(st.Where(ref.line, ref.path), ": weight ignored: '", p->name(), "' is not a scorer"));
      if (const Picker* pk = p->AsPicker()) {
        if (prof.picker)
          return st.Error(ref.line, ref.path,
                          absl::StrCat("profile '", ps.name, "' has two pickers: '", prof.picker_plugin->name(), "' and '", p->name(), "'"));
        prof.picker = pk;
        prof.picker_plugin = p;
      } else if (const Filter* f = p->AsFilter()) {
        prof.filters.emplace_back(p, f);
      } else {
        // llm-d's profiles take what filters, scores or picks and silently ignore the rest, and its
        // own configs rely on that: request-attribute-reporter, parsers, predicted-latency-producer
        // and (v0.7/v0.8) tokenizer listed among a profile's plugins. epp loads them the same way
        // but says so: such a plugin acts on every request, or not at all, wherever it is listed.
        st.impl->warnings.push_back(absl::StrCat(st.Where(ref.line, ref.path), ": '", p->name(), "' (", p->type(),
                                                 ") has no part in a profile's filters, scorers or picker; it acts on "
                                                 "every request wherever it is listed"));
      }
    }
    if (!prof.picker) {
      if (!default_picker) {
        const std::string name(plugins::kMaxScorePickerType);
        if (st.by_name.count(name)) return st.Error(ps.line, ps.path, "cannot add the default max-score-picker: the name is taken");
        EPP_ASSIGN_OR_RETURN(default_picker, st.AddDefault(plugins::kMaxScorePickerType, name));
      }
      prof.picker = default_picker->AsPicker();
      prof.picker_plugin = default_picker;
    }
    st.impl->profile_names.push_back(prof.name);
    st.impl->profiles.push_back(std::move(prof));
  }
  return absl::OkStatus();
}

absl::Status ResolveReferences(BuildState& st) {
  PluginReferences refs;
  refs.plugin = [&st](std::string_view name) -> const Plugin* {
    auto it = st.by_name.find(std::string(name));
    return it == st.by_name.end() ? nullptr : it->second;
  };
  refs.profiles = st.impl->profile_names;
  refs.warnings = &st.impl->warnings;
  for (const auto& p : st.impl->plugins) refs.all.push_back(p.get());
  for (const auto& p : st.impl->plugins) {
    if (!p->HasReferences()) continue;
    if (absl::Status s = p->Resolve(refs); !s.ok())
      return absl::Status(s.code(), absl::StrCat(st.Where(0, ""), ": plugin '", p->name(), "': ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status ResolveProfileHandler(BuildState& st) {
  Scheduler::Impl& impl = *st.impl;
  for (const auto& p : impl.plugins) {
    if (!p->AsProfileHandler()) continue;
    if (impl.handler)
      return st.Error(0, "", absl::StrCat("two profile handlers: '", impl.handler_plugin->name(), "' and '", p->name(), "'"));
    impl.handler = p->AsProfileHandler();
    impl.handler_plugin = p.get();
  }
  if (!impl.handler) {
    if (impl.profiles.size() != 1)
      return st.Error(0, "schedulingProfiles",
                      absl::StrCat(impl.profiles.size(), " profiles need a profile handler (single-profile-handler runs exactly one; "
                                   "disagg-profile-handler runs decode, prefill and encode profiles)"));
    const std::string name(plugins::kSingleProfileHandlerType);
    EPP_ASSIGN_OR_RETURN(const Plugin* raw, st.AddDefault(plugins::kSingleProfileHandlerType, name));
    impl.handler = raw->AsProfileHandler();
    impl.handler_plugin = raw;
  } else if (impl.handler_plugin->type() == plugins::kSingleProfileHandlerType && impl.profiles.size() != 1) {
    return st.Error(0, "schedulingProfiles",
                    absl::StrCat("single-profile-handler needs exactly one profile, the config has ", impl.profiles.size()));
  }
  for (std::string h : impl.handler->OwnedHeaders()) {
    for (char& c : h) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    impl.owned_headers.push_back(std::move(h));
  }
  return absl::OkStatus();
}

absl::Status ResolveSaturationDetector(BuildState& st) {
  Scheduler::Impl& impl = *st.impl;
  const EppConfig& c = st.config;
  if (!c.saturation_detector_ref.empty()) {
    auto it = st.by_name.find(c.saturation_detector_ref);
    if (it == st.by_name.end())
      return st.Error(0, "saturationDetector.pluginRef", absl::StrCat("references undefined plugin '", c.saturation_detector_ref, "'"));
    if (!it->second->AsSaturationDetector())
      return st.Error(0, "saturationDetector.pluginRef", absl::StrCat("plugin '", c.saturation_detector_ref, "' is not a saturation detector"));
    impl.detector = it->second->AsSaturationDetector();
    impl.detector_plugin = it->second;
    return absl::OkStatus();
  }
  // A configured plugin named utilization-detector is the detector, unless the config also gives
  // the section's own parameters (then those build a separate default).
  auto it = st.by_name.find(std::string(plugins::kUtilizationDetectorType));
  if (it != st.by_name.end() && it->second->AsSaturationDetector() && c.saturation_detector_params.is_null()) {
    impl.detector = it->second->AsSaturationDetector();
    impl.detector_plugin = it->second;
    return absl::OkStatus();
  }
  Params params = c.saturation_detector_params;
  if (params.path().empty()) params.SetPath("saturationDetector");
  std::string name(plugins::kUtilizationDetectorType);
  if (st.by_name.count(name)) name = "default-utilization-detector";
  absl::StatusOr<const Plugin*> raw = st.AddDefault(plugins::kUtilizationDetectorType, name, params);
  if (!raw.ok()) return absl::InvalidArgumentError(absl::StrCat(st.Where(0, ""), ": ", raw.status().message()));
  impl.detector = (*raw)->AsSaturationDetector();
  impl.detector_plugin = *raw;
  return absl::OkStatus();
}

absl::Status ResolvePrefixProducer(BuildState& st) {
  Scheduler::Impl& impl = *st.impl;
  const Plugin* producer = nullptr;
  for (const auto& p : impl.plugins) {
    if (!p->AsDataProducer() || plugins::IsTokenSource(*p) || !p->AsDataProducer()->FillsPrefix()) continue;
    if (producer) return st.Error(0, "", absl::StrCat("two prefix producers: '", producer->name(), "' and '", p->name(), "'"));
    producer = p.get();
  }
  // A plugin declares that it reads prefix-match data (Plugin::Consumes); only plugins that a
  // profile uses count, so an unused scorer does not pull a producer in.
  auto needs_prefix = [](const Plugin& p) { return p.Consumes().has(PluginInput::kPrefixMatch); };
  // Latency predictions: llm-d registers predicted-latency-producer as its data's default
  // producer, so a profile (or an admitter) that reads predictions without one gets one.
  {
    auto needs_latency = [](const Plugin& p) { return p.Consumes().has(PluginInput::kLatencyPrediction); };
    bool latency_needed = false, latency_present = false;
    for (const Profile& prof : impl.profiles) {
      for (const auto& f : prof.filters) latency_needed |= needs_latency(*f.first);
      for (const auto& s : prof.scorers) latency_needed |= needs_latency(*s.plugin);
    }
    for (const auto& p : impl.plugins) {
      if (p->AsAdmitter()) latency_needed |= needs_latency(*p);
      latency_present |= p->type() == plugins::kPredictedLatencyProducerType;
    }
    if (latency_needed && !latency_present) {
      EPP_RETURN_IF_ERROR(st.AddDefault(plugins::kPredictedLatencyProducerType,
                                        std::string(plugins::kPredictedLatencyProducerType))
                              .status());
    }
  }
  bool needed = false;
  for (const Profile& prof : impl.profiles) {
    for (const auto& f : prof.filters) needed |= needs_prefix(*f.first);
    for (const auto& s : prof.scorers) needed |= needs_prefix(*s.plugin);
  }
  // A profile handler reads what its deciders read (prefix-based-pd-decider: the decode
  // endpoint's cached prefix).
  // So does a data producer that reads them (predicted-latency-producer's prefix feature).
  for (const auto& p : impl.plugins)
    if (p->AsProfileHandler() || (p->AsDataProducer() && !p->AsDataProducer()->FillsPrefix()))
      needed |= needs_prefix(*p);
  if (needed && !producer) {
    EPP_ASSIGN_OR_RETURN(producer, st.AddDefault(plugins::kApproxPrefixProducerType, std::string(plugins::kApproxPrefixProducerType)));
  }
  // mm-embeddings-cache-scorer reads what an mm-embeddings-cache-producer finds; llm-d registers
  // that producer as its data's default, so a profile using the scorer without one gets one.
  bool mm_needed = false, mm_present = false;
  for (const Profile& prof : impl.profiles)
    for (const auto& s : prof.scorers) mm_needed |= s.plugin->type() == plugins::kMmEmbeddingsCacheScorerType;
  for (const auto& p : impl.plugins) mm_present |= p->type() == plugins::kMmEmbeddingsCacheProducerType;
  if (mm_needed && !mm_present) {
    EPP_RETURN_IF_ERROR(st.AddDefault(plugins::kMmEmbeddingsCacheProducerType,
                                      std::string(plugins::kMmEmbeddingsCacheProducerType))
                            .status());
  }
  // prefix-cache-scorer's prefixMatchInfoProducerName must name the producer in use.
  for (const auto& p : impl.plugins) {
    if (p->type() != plugins::kPrefixCacheScorerType) continue;
    const Params eff = p->EffectiveParams();
    if (const Params* ref = eff.Find("prefixMatchInfoProducerName"); ref && !ref->text().empty()) {
      if (!producer || producer->name() != ref->text())
        return st.Error(0, "", absl::StrCat("plugin '", p->name(), "': prefixMatchInfoProducerName '", ref->text(),
                                            "' does not name the prefix producer in use"));
    }
  }
  return absl::OkStatus();
}

// llm-d's parser selection: requestHandler.parsers in order (else the deprecated `parser`), else
// llm-d's default list (ParserSet::Default). ParserSet keeps each parser once and ends the list
// at the first parser claiming no paths (passthrough-parser, the fallback).
void ResolveParsers(BuildState& st) {
  std::vector<std::string> refs = st.config.parser_refs;
  if (refs.empty() && !st.config.parser_ref.empty()) refs.push_back(st.config.parser_ref);
  if (refs.empty()) return;  // Impl's default
  std::vector<RequestParser> list;
  for (const std::string& r : refs)
    if (auto it = st.by_name.find(r); it != st.by_name.end())
      if (std::optional<RequestParser> p = plugins::ParserOf(*it->second)) list.push_back(*p);
  st.impl->parsers = ParserSet(list);
}

void IndexHooks(BuildState& st) {
  ResolveParsers(st);
  // Token producers first: the prefix producer reads their tokens.
  for (const auto& p : st.impl->plugins)
    if (plugins::IsTokenSource(*p) && p->AsDataProducer()) st.impl->producers.push_back(p->AsDataProducer());
  // Then the prefix producer, then the producers of other data (they may read its matches).
  for (const auto& p : st.impl->plugins)
    if (const DataProducer* d = p->AsDataProducer(); d && !plugins::IsTokenSource(*p) && d->FillsPrefix())
      st.impl->producers.push_back(d);
  for (const auto& p : st.impl->plugins) {
    const DataProducer* d = p->AsDataProducer();
    if (d && !plugins::IsTokenSource(*p) && !d->FillsPrefix()) st.impl->producers.push_back(d);
    if (const Screener* sc = p->AsScreener()) st.impl->screeners.push_back(sc);
    if (const RequestHeaderSource* rh = p->AsRequestHeaderSource()) {
      st.impl->request_header_sources.push_back(rh);
      for (std::string h : rh->OwnedHeaders()) {
        for (char& c : h) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (std::find(st.impl->owned_headers.begin(), st.impl->owned_headers.end(), h) == st.impl->owned_headers.end())
          st.impl->owned_headers.push_back(std::move(h));
      }
    }
    if (const RequestObserver* o = p->AsRequestObserver()) st.impl->observers.push_back(o);
    if (const Admitter* a = p->AsAdmitter()) st.impl->admitters.push_back(a);
    if (const RequestHeaderProcessor* h = p->AsRequestHeaderProcessor()) st.impl->header_processors.push_back(h);
    if (const ResponseHeaderSource* h = p->AsResponseHeaderSource()) st.impl->response_header_sources.push_back(h);
    if (const ResponseMetadataSource* m = p->AsResponseMetadataSource()) st.impl->response_metadata_sources.push_back(m);
  }
}

Params EffectiveDocument(const EppConfig& c, const Scheduler::Impl& impl) {
  Params doc = Params::Map();
  doc.Set("apiVersion", Params::String(c.api_version));
  doc.Set("kind", Params::String("EndpointPickerConfig"));
  if (!c.feature_gates.empty()) {
    Params gates = Params::List();
    for (const auto& g : c.feature_gates) gates.Append(Params::String(g));
    doc.Set("featureGates", std::move(gates));
  }
  // Every plugin the scheduler holds, defaults included, with all its parameters.
  Params plugin_list = Params::List();
  for (const auto& p : impl.plugins) {
    Params entry = Params::Map();
    entry.Set("name", Params::String(p->name()));
    entry.Set("type", Params::String(p->type()));
    Params eff = p->EffectiveParams();
    if (eff.kind() != Params::Kind::kMap || !eff.entries().empty()) entry.Set("parameters", std::move(eff));
    plugin_list.Append(std::move(entry));
  }
  doc.Set("plugins", std::move(plugin_list));
  // Profiles in the order the cycle runs their plugins: filters, weighted scorers, the picker.
  Params profs = Params::List();
  for (const Profile& prof : impl.profiles) {
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
  if (impl.detector_plugin != nullptr)
    doc.Set("saturationDetector", Params::Map().Set("pluginRef", Params::String(impl.detector_plugin->name())));
  return doc;
}

}  // namespace epp::build
