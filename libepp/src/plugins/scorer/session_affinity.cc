// llm-d's session affinity: session-affinity-scorer (1.0 for the session's endpoint, 0 for the
// others) and session-affinity-filter (only the session's endpoint when it is a candidate, else
// every candidate), one implementation, two strategies:
//   encoded_endpoint_header (default, stateless): the request header (x-session-token) carries
//     base64 of the endpoint that served the session before; every response carries the token
//     of the endpoint that served it (the primary profile's, or `profileName`'s).
//   session_id (stateful): the client sends an opaque id (x-session-id, or the first non-empty
//     source of `sessionIdConfig.sources`: a request header, or a request attribute a
//     request-header processor published, e.g. {attribute: agent-identity} or
//     {attribute: SessionIDDataKey, producer: session-id-producer}, keyed as llm-d keys them:
//     "<attribute>/<producer>"); the first pick binds it to the endpoint chosen, later
//     picks prefer that endpoint while it is a candidate and move the binding when it is not.
//     Bindings unused for evictionTtlSeconds go (swept every evictionSweepSeconds). Nothing is
//     written back. Each plugin instance keeps its own bindings.
// multicluster-session-affinity-filter is the filter under llm-d's cluster-scoped type: its
// candidates are cluster endpoints, so a session pins to its cluster with no change.
// Deviation: the token names the endpoint by its address ("10.0.0.1:8000", base64 with padding),
// where llm-d names its datastore id ("namespace/pod-rank-0"); either is opaque to clients, and a
// token epp cannot match is no preference, as in llm-d.
#include <cmath>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "epp/scheduling.h"
#include "plugins/scorer/scorer.h"

namespace epp::plugins {
namespace {

// Where a session id is read (sessionIdConfig.sources): a request header, or a request
// attribute (`name` is its data type, `producer` the plugin that published it, "" for any).
struct IdSource {
  bool attribute = false;
  std::string name;  // header names lower case
  std::string producer;
  std::string Key() const { return absl::StrCat(name, "/", producer); }  // RequestAttributes' key
};

struct SessionOptions {
  bool session_id = false;             // strategy
  std::string profile;                 // profileName ("" = the primary profile)
  std::string header = "x-session-token";
  std::vector<IdSource> id_sources = {IdSource{false, "x-session-id", ""}};
  int64_t ttl_us = 300'000'000, sweep_us = 10'000'000;
};

// The scorer's or the filter's parameter table (below the class; they differ in error text).
const ParamTable<SessionOptions>& Table(std::string_view type);

class SessionAffinity : public Plugin,
                        public Scorer,
                        public Filter,
                        public RequestObserver,
                        public ResponseHeaderSource {
 public:
  SessionAffinity(TypedName tn, SessionOptions o, bool filter) : Plugin(std::move(tn)), o_(std::move(o)), filter_(filter) {}
  const Scorer* AsScorer() const override { return filter_ ? nullptr : this; }
  const Filter* AsFilter() const override { return filter_ ? this : nullptr; }
  const RequestObserver* AsRequestObserver() const override { return o_.session_id ? this : nullptr; }
  const ResponseHeaderSource* AsResponseHeaderSource() const override { return o_.session_id ? nullptr : this; }

  Params EffectiveParams() const override { return Table(type()).Effective(o_); }

  ScorerCategory category() const override { return ScorerCategory::kAffinity; }
  void Score(const SchedulingContext& ctx, Candidates candidates, std::span<double> scores) const override {
    const Endpoint* target = Target(ctx, candidates);
    for (size_t i = 0; i < candidates.size(); ++i) scores[i] = candidates[i] == target ? 1.0 : 0.0;
  }
  std::string Explain(const SchedulingContext& ctx, const Endpoint& e) const override {
    const std::string wanted = Wanted(ctx);
    if (wanted.empty()) return "no session";
    return wanted == e.address ? "the session's endpoint" : absl::StrCat("session on ", wanted);
  }

  std::vector<const Endpoint*> Apply(const SchedulingContext& ctx, Candidates candidates) const override {
    const Endpoint* target = Target(ctx, candidates);
    if (target == nullptr) return {candidates.begin(), candidates.end()};
    return {target};
  }
  std::string WhyRemoved(const SchedulingContext& ctx, const Endpoint&) const override {
    return absl::StrCat("not the session's endpoint (", Wanted(ctx), ")");
  }

  // session_id: bind, refresh or move the session to the primary endpoint (the first PreRequest
  // of a pick; later ones are the other profiles' endpoints). What this request's Target call saw
  // comes through the thread: PreRequest runs on the same thread, in the same Pick.
  void PreRequest(const SchedulingContext& ctx, const Endpoint& picked) const override {
    const std::string id = SessionId(ctx);
    if (id.empty()) return;
    Last& last = LastCall();
    if (!last.Same(ctx) || last.done) return;  // not this pick's, or already bound
    last.done = true;
    std::lock_guard<std::mutex> lock(mu_);
    Sweep(ctx.now_us);
    auto it = bindings_.find(id);
    if (it == bindings_.end()) {
      if (bindings_.size() >= kMaxBindings) return;  // full: new sessions go unbound until the sweep frees room
      bindings_.emplace(id, Binding{picked.address, ctx.now_us});
    } else if (it->second.endpoint == picked.address) {
      it->second.last_seen_us = ctx.now_us;
    } else if (last.bound_absent) {  // its endpoint was not a candidate: the session moves
      it->second = Binding{picked.address, ctx.now_us};
    }
  }

  void ResponseHeaders(const SchedulingContext&, std::span<const ProfileRun> runs, std::string_view primary,
                       std::vector<std::pair<std::string, std::string>>& out) const override {
    const std::string_view profile = o_.profile.empty() ? primary : std::string_view(o_.profile);
    for (const ProfileRun& r : runs)
      if (r.profile == profile && !r.picked.empty()) out.emplace_back(o_.header, absl::Base64Escape(r.picked.front()->address));
  }

 private:
  struct Binding {
    std::string endpoint;
    int64_t last_seen_us;
  };
  // What this instance's first Target call of the current pick saw on this thread (PreRequest
  // runs on the same thread, in the same Pick, right after the profiles); one slot per instance.
  struct Last {
    const InferenceRequest* request = nullptr;
    int64_t now_us = 0;  // with the request's address, tells this pick from an earlier one
    bool bound_absent = false;
    bool done = false;
    bool Same(const SchedulingContext& ctx) const { return request == ctx.request && now_us == ctx.now_us; }
  };
  Last& LastCall() const {
    thread_local absl::flat_hash_map<const SessionAffinity*, Last> last;
    if (last.size() > 64) last.clear();  // instances of old schedulers (reloads)
    return last[this];
  }
  static constexpr size_t kMaxBindings = 1'000'000;
  static constexpr size_t kMaxIdBytes = 256;

  std::string SessionId(const SchedulingContext& ctx) const {
    if (!ctx.request) return {};
    for (const IdSource& src : o_.id_sources) {
      std::optional<std::string_view> v;
      if (!src.attribute) {
        v = ctx.request->header(src.name);
      } else if (const std::string* a = ctx.attributes.Find(src.Key())) {
        v = *a;
      }
      if (!v) continue;
      std::string s(absl::StripAsciiWhitespace(absl::string_view(v->data(), v->size())));
      if (s.size() > kMaxIdBytes) s.resize(kMaxIdBytes);  // ids are opaque; bound what a client can make us keep
      if (!s.empty()) return s;
    }
    return {};
  }

  // The address the session names ("" for none).
  std::string Wanted(const SchedulingContext& ctx) const {
    if (!ctx.request) return {};
    if (o_.session_id) {
      const std::string id = SessionId(ctx);
      if (id.empty()) return {};
      std::lock_guard<std::mutex> lock(mu_);
      auto it = bindings_.find(id);
      return it == bindings_.end() ? std::string() : it->second.endpoint;
    }
    std::optional<std::string_view> token = ctx.request->header(o_.header);
    std::string decoded;
    if (!token || !absl::Base64Unescape(absl::string_view(token->data(), token->size()), &decoded)) return {};
    return decoded;
  }

  const Endpoint* Target(const SchedulingContext& ctx, Candidates candidates) const {
    const std::string wanted = Wanted(ctx);
    const Endpoint* target = nullptr;
    for (const Endpoint* e : candidates)
      if (!wanted.empty() && e->address == wanted) target = e;
    if (o_.session_id) {
      Last& last = LastCall();
      // The first profile this instance scores in decides (normally the primary's, decode-first);
      // a new request starts over.
      if (!last.Same(ctx) || last.done) last = Last{ctx.request, ctx.now_us, !wanted.empty() && target == nullptr, false};
    }
    return target;
  }

  void Sweep(int64_t now_us) const {  // REQUIRES: mu_
    if (now_us - last_sweep_us_ < o_.sweep_us) return;
    last_sweep_us_ = now_us;
    for (auto it = bindings_.begin(); it != bindings_.end();) {
      auto cur = it++;
      if (now_us - cur->second.last_seen_us > o_.ttl_us) bindings_.erase(cur);
    }
  }

  SessionOptions o_;
  bool filter_;
  mutable std::mutex mu_;
  mutable absl::flat_hash_map<std::string, Binding> bindings_;
  mutable int64_t last_sweep_us_ = 0;
};

absl::Status Bad(const Params& at, std::string_view key, std::string_view what, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(at.path(), ".", std::string(key), ": ", msg, " (", std::string(what), ")"));
}

// A header name as compared: lower case, no surrounding blanks.
std::string HeaderName(std::string h) { return absl::AsciiStrToLower(absl::StripAsciiWhitespace(h)); }

// The table of the scorer or the filter (`what`: the type, named in their errors). Read in
// declaration order: sessionIdConfig counts only with strategy session_id.
ParamTable<SessionOptions>* MakeTable(std::string what) {
  auto* t = new ParamTable<SessionOptions>();
  t->Custom("strategy", ParamType::kString, "encoded_endpoint_header (stateless, the default) or session_id (bindings kept here)",
            [what](const Params& v, SessionOptions& o) -> absl::Status {
              EPP_ASSIGN_OR_RETURN(std::string strategy, v.AsString());
              if (strategy != "encoded_endpoint_header" && strategy != "session_id")
                return absl::InvalidArgumentError(absl::StrCat(v.path(), ": must be \"encoded_endpoint_header\" or \"session_id\", got \"",
                                                               strategy, "\" (", what, ")"));
              o.session_id = strategy == "session_id";
              return absl::OkStatus();
            },
            [](const SessionOptions& o) { return Params::String(o.session_id ? "session_id" : "encoded_endpoint_header"); })
      .String("profileName", &SessionOptions::profile,
              "the profile whose endpoint the token names (encoded_endpoint_header); empty: the primary profile")
      .OmitEmpty()
      // llm-d v0.9's flat spelling, removed (not deprecated) by v0.10's strategies, whose
      // decoder rejects it: rejected here too, naming the replacement.
      .Custom("headerName", ParamType::kString, "llm-d v0.9's form, rejected: use encodedEndpointHeaderConfig.header",
              [](const Params& v, SessionOptions&) -> absl::Status {
                return absl::InvalidArgumentError(absl::StrCat(
                    v.path(), ": llm-d v0.9's form, removed in v0.10; use encodedEndpointHeaderConfig: {header: ", v.text(), "}"));
              },
              nullptr)
      .Deprecated()
      .Custom("encodedEndpointHeaderConfig", ParamType::kMap, "{header}: the request header carrying the token (x-session-token)",
              [](const Params& v, SessionOptions& o) -> absl::Status {
                EPP_RETURN_IF_ERROR(v.CheckKeys({"header"}));
                EPP_ASSIGN_OR_RETURN(std::string h, v.GetString("header", o.header));
                h = HeaderName(h);
                if (!h.empty()) o.header = h;
                return absl::OkStatus();
              },
              [](const SessionOptions& o) {
                if (o.session_id) return Params();
                return Params::Map().Set("header", Params::String(o.header));
              })
      .Custom("sessionIdConfig", ParamType::kMap,
              "{sources: [{header} or {attribute, producer}], evictionTtlSeconds (300), evictionSweepSeconds (10)}: "
              "with strategy session_id",
              [what](const Params& sc, SessionOptions& o) -> absl::Status {
                if (!o.session_id) return absl::OkStatus();
                EPP_RETURN_IF_ERROR(sc.CheckKeys({"sources", "evictionTtlSeconds", "evictionSweepSeconds"}));
                if (const Params* sources = sc.Find("sources"); sources && !sources->is_null()) {
                  if (sources->kind() != Params::Kind::kList)
                    return Bad(sc, "sources", what, "expected a list of {header} or {attribute}");
                  std::vector<IdSource> list;
                  for (const Params& s : sources->items()) {
                    EPP_RETURN_IF_ERROR(s.CheckKeys({"header", "attribute", "producer"}));
                    EPP_ASSIGN_OR_RETURN(std::string h, s.GetString("header", ""));
                    EPP_ASSIGN_OR_RETURN(std::string attr, s.GetString("attribute", ""));
                    EPP_ASSIGN_OR_RETURN(std::string producer, s.GetString("producer", ""));
                    h = HeaderName(h);
                    attr = std::string(absl::StripAsciiWhitespace(attr));
                    if (h.empty() == attr.empty()) return Bad(s, "", what, "exactly one of header or attribute must be set");
                    if (!h.empty() && !producer.empty()) return Bad(s, "producer", what, "only with attribute");
                    list.push_back(h.empty() ? IdSource{true, std::move(attr), std::string(absl::StripAsciiWhitespace(producer))}
                                             : IdSource{false, std::move(h), ""});
                  }
                  if (!list.empty()) o.id_sources = std::move(list);
                }
                EPP_ASSIGN_OR_RETURN(double ttl, sc.GetDouble("evictionTtlSeconds", 0));
                EPP_ASSIGN_OR_RETURN(double sweep, sc.GetDouble("evictionSweepSeconds", 0));
                if (!(ttl >= 0 && ttl <= 1e9)) return Bad(sc, "evictionTtlSeconds", what, "must be in [0, 1e9] (0: the default, 300)");
                if (!(sweep >= 0 && sweep <= 1e9)) return Bad(sc, "evictionSweepSeconds", what, "must be in [0, 1e9] (0: the default, 10)");
                if (ttl > 0) o.ttl_us = static_cast<int64_t>(ttl * 1e6);  // 0: the default, as in llm-d
                if (sweep > 0) o.sweep_us = static_cast<int64_t>(sweep * 1e6);
                return absl::OkStatus();
              },
              [](const SessionOptions& o) {
                if (!o.session_id) return Params();
                Params sources = Params::List();
                for (const IdSource& src : o.id_sources) {
                  Params entry = Params::Map().Set(src.attribute ? "attribute" : "header", Params::String(src.name));
                  if (!src.producer.empty()) entry.Set("producer", Params::String(src.producer));
                  sources.Append(std::move(entry));
                }
                return Params::Map()
                    .Set("sources", std::move(sources))
                    .Set("evictionTtlSeconds", Params::Number(static_cast<double>(o.ttl_us) / 1e6))
                    .Set("evictionSweepSeconds", Params::Number(static_cast<double>(o.sweep_us) / 1e6));
              });
  return t;
}

const ParamTable<SessionOptions>& Table(std::string_view type) {
  static const ParamTable<SessionOptions>* scorer = MakeTable(std::string(kSessionAffinityScorerType));
  static const ParamTable<SessionOptions>* filter = MakeTable(std::string(kSessionAffinityFilterType));
  static const ParamTable<SessionOptions>* multicluster = MakeTable(std::string(kMultiClusterSessionAffinityFilterType));
  if (type == kMultiClusterSessionAffinityFilterType) return *multicluster;
  return type == kSessionAffinityFilterType ? *filter : *scorer;
}

absl::StatusOr<SessionOptions> ReadSessionOptions(const Params& params, std::string_view what) {
  EPP_ASSIGN_OR_RETURN(SessionOptions o, Table(what).Read(params));
  if (o.session_id && !o.profile.empty())
    return Bad(params, "profileName", what,
               "with strategy session_id, sessions bind the primary profile's endpoint only (not implemented for other profiles)");
  return o;
}

}  // namespace

PluginOr CreateSessionAffinityScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(SessionOptions o, ReadSessionOptions(params, kSessionAffinityScorerType));
  return std::make_unique<SessionAffinity>(TN(kSessionAffinityScorerType, name), std::move(o), false);
}

PluginOr CreateSessionAffinityFilter(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(SessionOptions o, ReadSessionOptions(params, kSessionAffinityFilterType));
  return std::make_unique<SessionAffinity>(TN(kSessionAffinityFilterType, name), std::move(o), true);
}

PluginOr CreateMultiClusterSessionAffinityFilter(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(SessionOptions o, ReadSessionOptions(params, kMultiClusterSessionAffinityFilterType));
  return std::make_unique<SessionAffinity>(TN(kMultiClusterSessionAffinityFilterType, name), std::move(o), true);
}

PluginSchema SessionAffinityScorerSchema() { return Table(kSessionAffinityScorerType).Schema(); }
PluginSchema SessionAffinityFilterSchema() { return Table(kSessionAffinityFilterType).Schema(); }

}  // namespace epp::plugins
