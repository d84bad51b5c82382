// Shared state over Redis (see epp/runtime/redis_state.h): one thread, one connection, one
// pipelined round trip per interval.
#include "epp/runtime/redis_state.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "epp/runtime/logger.h"
#include "epp/scheduler.h"

namespace epp {

namespace {

constexpr size_t kMaxEndpointBytes = 1024;
constexpr size_t kMaxEntryBytes = size_t{1} << 20;  // one XADD's record; larger rounds are split

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetLe(std::string_view b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(b[at + static_cast<size_t>(i)])} << (8 * i);
  return v;
}

std::string DefaultReplicaId() {
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "epp");
  std::random_device rd;
  return absl::StrCat(host, "-", ::getpid(), "-", absl::Hex(rd() & 0xffffff, absl::kZeroPad6));
}

const RespValue* Element(const RespValue& v, size_t i) {
  return v.type == RespValue::Type::kArray && i < v.elements.size() ? &v.elements[i] : nullptr;
}

}  // namespace

void AppendSharedPrefixUpdate(std::string& out, std::string_view endpoint, std::span<const uint64_t> hashes,
                              int64_t capacity) {
  PutU32(out, static_cast<uint32_t>(endpoint.size()));
  out.append(endpoint);
  PutU64(out, static_cast<uint64_t>(capacity));
  PutU32(out, static_cast<uint32_t>(hashes.size()));
  for (uint64_t h : hashes) PutU64(out, h);
}

absl::StatusOr<std::vector<SharedPrefixUpdate>> DecodeSharedPrefixUpdates(std::string_view b) {
  std::vector<SharedPrefixUpdate> out;
  size_t at = 0;
  auto bad = [&](size_t where, std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("shared prefix record byte ", where, ": ", std::string(what)));
  };
  while (at < b.size()) {
    if (b.size() - at < 4) return bad(at, "truncated endpoint length");
    const uint64_t len = GetLe(b, at, 4);
    if (len == 0 || len > kMaxEndpointBytes) return bad(at, absl::StrCat("endpoint length ", len, " not in [1, 1024]"));
    at += 4;
    if (b.size() - at < len + 12) return bad(at, "truncated update");
    SharedPrefixUpdate u;
    u.endpoint.assign(b.substr(at, len));
    at += len;
    u.capacity = static_cast<int64_t>(GetLe(b, at, 8));
    if (u.capacity < 0) return bad(at, "negative capacity");
    at += 8;
    const uint64_t count = GetLe(b, at, 4);
    at += 4;
    if (count > (b.size() - at) / 8) return bad(at, absl::StrCat(count, " blocks do not fit the record"));
    u.hashes.reserve(count);
    for (uint64_t i = 0; i < count; ++i, at += 8) u.hashes.push_back(GetLe(b, at, 8));
    out.push_back(std::move(u));
  }
  return out;
}

struct RedisSharedState::Impl {
  SharedStateOptions o;
  RedisAddress address;
  PrefixSinks sinks;

  // Publish and Subscribe (any thread).
  mutable std::mutex mu;
  struct Pending {
    std::string producer, endpoint;
    std::vector<uint64_t> hashes;
    int64_t capacity;
  };
  std::deque<Pending> pending;
  std::map<uint64_t, std::string> subscriptions;  // id -> producer
  SharedStateStats stats;                          // under mu

  // ShareFlowService registrations. Its own mutex, held while the thread calls a source or a
  // sink, so that UnshareFlowService waits for a call in progress (the callbacks take their
  // plugin's lock, never this one).
  struct ServiceShare {
    std::string policy;
    ServiceSource source;
    ServiceSink sink;
  };
  std::mutex services_mu;
  std::map<uint64_t, ServiceShare> services;
  uint64_t next_service_id = 1;
  void DeliverServices(const std::map<std::string, std::map<std::string, double>>& others);

  // The thread's own.
  std::function<std::shared_ptr<const Scheduler>()> scheduler;
  std::function<std::vector<std::string>()> endpoints;
  const Logger* log = nullptr;
  std::unique_ptr<RedisConnection> conn;
  std::map<std::string, std::string> last_id;  // stream key -> last entry id read
  std::vector<std::string> others;             // other replicas seen last round
  std::vector<std::string> gone;               // replicas whose counts expired: SREM next round
  bool connected_once = false;
  bool reported_down = false;
  bool backlog = false;
  // Stream entries the next XREAD asks for: o.read_count, halved each time an answer passes
  // o.max_round_bytes (down to 1), back to o.read_count once a read finds no backlog.
  size_t read_count_now = 1;
  bool shrunk = false;  // the last round failed on the byte budget: the next one at once

  std::thread thread;
  std::condition_variable cv;
  bool stop = false;  // under mu

  std::string Key(std::string_view what) const { return o.key_prefix + std::string(what); }
  std::string StreamKey(std::string_view producer) const { return o.key_prefix + "prefix:" + std::string(producer); }
  std::string LoadKey(std::string_view replica) const { return o.key_prefix + "load:" + std::string(replica); }
  std::string ServiceKey(std::string_view replica) const { return o.key_prefix + "service:" + std::string(replica); }

  absl::Status Round();
  void Failed(const absl::Status& st, std::deque<Pending> unsent);
  void Loop();
};

absl::StatusOr<std::unique_ptr<RedisSharedState>> RedisSharedState::Create(SharedStateOptions options) {
  auto impl = std::make_unique<Impl>();
  EPP_ASSIGN_OR_RETURN(impl->address, ParseRedisAddress(options.address));
  if (!options.password.empty()) impl->address.password = options.password;
  if (options.key_prefix.empty()) options.key_prefix = "epp:default:";
  if (options.replica_id.empty()) options.replica_id = DefaultReplicaId();
  if (options.interval.count() <= 0) return absl::InvalidArgumentError("shared state: the interval must be > 0");
  if (options.timeout.count() <= 0) return absl::InvalidArgumentError("shared state: the timeout must be > 0");
  if (options.load_ttl.count() <= 0)
    options.load_ttl = std::max(std::chrono::milliseconds(1000), options.interval * 20);
  if (options.load_ttl <= options.interval)
    return absl::InvalidArgumentError("shared state: the load expiry must be longer than the interval");
  if (options.stream_max_entries < 1) return absl::InvalidArgumentError("shared state: stream_max_entries must be >= 1");
  options.read_count = std::max<size_t>(1, options.read_count);
  if (options.max_round_bytes < (size_t{16} << 20))
    return absl::InvalidArgumentError("shared state: max_round_bytes must be >= 16 MiB (one stream entry is up to 8)");
  impl->read_count_now = options.read_count;
  impl->o = std::move(options);
  return std::unique_ptr<RedisSharedState>(new RedisSharedState(std::move(impl)));
}

RedisSharedState::RedisSharedState(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RedisSharedState::~RedisSharedState() { Stop(); }

const SharedStateOptions& RedisSharedState::options() const { return impl_->o; }
std::string RedisSharedState::redacted_address() const { return impl_->address.Redacted(); }

SharedStateStats RedisSharedState::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

void RedisSharedState::Publish(std::string_view producer, std::string_view endpoint, std::span<const uint64_t> hashes,
                               int64_t capacity) {
  if (hashes.empty() || endpoint.empty() || endpoint.size() > kMaxEndpointBytes) return;
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->pending.size() >= impl_->o.max_pending) {
    impl_->pending.pop_front();
    impl_->stats.dropped++;
  }
  impl_->pending.push_back(Impl::Pending{std::string(producer), std::string(endpoint),
                                         std::vector<uint64_t>(hashes.begin(), hashes.end()), capacity});
}

uint64_t RedisSharedState::Subscribe(std::string_view producer, Sink sink) {
  const uint64_t id = impl_->sinks.Add(producer, std::move(sink));
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->subscriptions[id] = std::string(producer);
  return id;
}

void RedisSharedState::Unsubscribe(uint64_t id) {
  impl_->sinks.Remove(id);
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->subscriptions.erase(id);
}

uint64_t RedisSharedState::ShareFlowService(std::string_view policy, ServiceSource source, ServiceSink sink) {
  std::lock_guard<std::mutex> lock(impl_->services_mu);
  const uint64_t id = impl_->next_service_id++;
  impl_->services[id] = Impl::ServiceShare{std::string(policy), std::move(source), std::move(sink)};
  return id;
}

void RedisSharedState::UnshareFlowService(uint64_t id) {
  std::lock_guard<std::mutex> lock(impl_->services_mu);
  impl_->services.erase(id);
}

void RedisSharedState::Impl::DeliverServices(const std::map<std::string, std::map<std::string, double>>& others) {
  std::lock_guard<std::mutex> lock(services_mu);
  for (const auto& [id, share] : services) {
    FlowServices list;
    if (auto it = others.find(share.policy); it != others.end()) list.assign(it->second.begin(), it->second.end());
    share.sink(list);
  }
}

// A replica's attained service per flow, the value of its service key: a line per flow,
// "policy<TAB>flow<TAB>service". Flow ids come from clients (fairness-id headers): one with a tab
// or a newline, or longer than kMaxFlowIdBytes, is not shared; at most kMaxSharedFlows per
// policy, the most served first (the heavy flows are the ones the other replicas must know of to
// hold them back).
namespace {
constexpr size_t kMaxFlowIdBytes = 256;
constexpr size_t kMaxSharedFlows = 4096;
bool Shareable(absl::string_view s) {
  return !s.empty() && s.size() <= kMaxFlowIdBytes && s.find_first_of("\t\n") == absl::string_view::npos;
}
}  // namespace

void RedisSharedState::Impl::Failed(const absl::Status& st, std::deque<Pending> unsent) {
  conn.reset();
  if (std::shared_ptr<const Scheduler> s = scheduler ? scheduler() : nullptr) s->SetRemoteLoad({});
  DeliverServices({});
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    stats.up = false;
    stats.errors++;
    stats.last_error = std::string(st.message());
    stats.remote_requests = 0;
    stats.replicas = 0;
    // What this round took goes back in front of what arrived since, within the bound.
    while (!unsent.empty() && pending.size() < o.max_pending) {
      pending.push_front(std::move(unsent.back()));
      unsent.pop_back();
    }
    stats.dropped += static_cast<int64_t>(unsent.size());
    first = !reported_down;
    reported_down = true;
  }
  if (first && log != nullptr)
    log->Warn(absl::StrCat("shared state: ", st.message(),
                           "; this replica routes on its own state until Redis answers again"));
}

absl::Status RedisSharedState::Impl::Round() {
  const auto started = std::chrono::steady_clock::now();
  std::deque<Pending> batch;
  std::vector<std::string> producers;
  {
    std::lock_guard<std::mutex> lock(mu);
    batch.swap(pending);
    for (const auto& [id, p] : subscriptions)
      if (std::find(producers.begin(), producers.end(), p) == producers.end()) producers.push_back(p);
  }
  if (conn == nullptr || !conn->ok()) {
    RedisConnectOptions co;
    co.connect_timeout = o.timeout;
    co.io_timeout = o.timeout;
    co.ca_file = o.ca_file;
    // Every value this connection reads is ours: a record is at most kMaxEntryBytes plus one
    // update (a 16 MiB request's blocks are under 2 MiB of hashes), so a longer bulk string is
    // refused before it is buffered whole.
    co.limits.max_bulk_bytes = kMaxEntryBytes + (size_t{7} << 20);
    // And one answer (the XREAD's: up to read_count entries) at most max_round_bytes: past it
    // the read count halves and the round is retried at once (below), so a round's memory is
    // bounded and a backlog of large entries is still read, a few at a time.
    co.limits.max_value_bytes = o.max_round_bytes;
    absl::StatusOr<std::unique_ptr<RedisConnection>> c = RedisConnection::Connect(address, co);
    if (!c.ok()) {
      Failed(c.status(), std::move(batch));
      return c.status();
    }
    conn = *std::move(c);
    if (connected_once) {
      std::lock_guard<std::mutex> lock(mu);
      stats.reconnects++;
    }
  }
  std::shared_ptr<const Scheduler> sched = scheduler ? scheduler() : nullptr;
  const std::vector<std::string> pool = endpoints ? endpoints() : std::vector<std::string>{};

  std::vector<std::vector<std::string>> cmds;
  // 1. This replica's prefix updates, one stream entry per producer (split past kMaxEntryBytes).
  std::map<std::string, std::vector<std::string>> records;
  for (const Pending& p : batch) {
    std::vector<std::string>& r = records[p.producer];
    if (r.empty() || r.back().size() >= kMaxEntryBytes) r.emplace_back();
    AppendSharedPrefixUpdate(r.back(), p.endpoint, p.hashes, p.capacity);
  }
  const std::string max_len = std::to_string(o.stream_max_entries);
  size_t xadds = 0;
  for (auto& [producer, rs] : records)
    for (std::string& r : rs) {
      cmds.push_back({"XADD", StreamKey(producer), "MAXLEN", "~", max_len, "*", "r", o.replica_id, "b", std::move(r)});
      ++xadds;
    }
  // 2. This replica's in-flight counts, with an expiry, and its membership.
  std::string load;
  if (sched != nullptr)
    for (const std::string& e : pool) {
      const auto [requests, tokens] = sched->Inflight(e);
      if (requests == 0 && tokens == 0) continue;
      absl::StrAppend(&load, e, " ", requests, " ", tokens, "\n");
    }
  cmds.push_back({"SET", LoadKey(o.replica_id), load, "PX", std::to_string(o.load_ttl.count())});
  // 2b. This replica's attained service per flow (program-aware-fairness), the same way.
  bool sharing_services = false;
  {
    std::string service;
    std::lock_guard<std::mutex> lock(services_mu);
    sharing_services = !services.empty();
    for (const auto& [id, share] : services) {
      if (!Shareable(share.policy)) continue;
      FlowServices mine = share.source();
      std::erase_if(mine, [](const auto& f) { return !Shareable(f.first) || !(f.second > 0) || !std::isfinite(f.second); });
      if (mine.size() > kMaxSharedFlows) {
        std::partial_sort(mine.begin(), mine.begin() + kMaxSharedFlows, mine.end(),
                          [](const auto& a, const auto& b) { return a.second > b.second; });
        mine.resize(kMaxSharedFlows);
      }
      for (const auto& [flow, value] : mine) absl::StrAppend(&service, share.policy, "\t", flow, "\t", value, "\n");
    }
    if (sharing_services)
      cmds.push_back({"SET", ServiceKey(o.replica_id), service, "PX", std::to_string(o.load_ttl.count())});
  }
  cmds.push_back({"SADD", Key("replicas"), o.replica_id});
  for (const std::string& g : gone) cmds.push_back({"SREM", Key("replicas"), g});
  // 3. The other replicas' prefix updates since the last read (from the start at first: warm).
  const size_t xread_at = cmds.size();
  if (!producers.empty()) {
    std::vector<std::string> x{"XREAD", "COUNT", std::to_string(read_count_now), "STREAMS"};
    for (const std::string& p : producers) x.push_back(StreamKey(p));
    for (const std::string& p : producers) {
      auto it = last_id.find(StreamKey(p));
      x.push_back(it == last_id.end() ? "0" : it->second);
    }
    cmds.push_back(std::move(x));
  }
  // 4. Who is there, and the counts of those seen last round.
  const size_t members_at = cmds.size();
  cmds.push_back({"SMEMBERS", Key("replicas")});
  const size_t mget_at = cmds.size();
  const std::vector<std::string> asked = others;
  if (!asked.empty()) {
    std::vector<std::string> m{"MGET"};
    for (const std::string& r : asked) m.push_back(LoadKey(r));
    cmds.push_back(std::move(m));
  }
  const size_t service_mget_at = cmds.size();
  if (sharing_services && !asked.empty()) {
    std::vector<std::string> m{"MGET"};
    for (const std::string& r : asked) m.push_back(ServiceKey(r));
    cmds.push_back(std::move(m));
  }

  absl::StatusOr<std::vector<RespValue>> answers = conn->Pipeline(cmds);
  if (!answers.ok()) {
    // An answer past the byte budget (RespReader: ResourceExhausted): read fewer entries, at
    // once. A round past the timeout reads fewer too (with the usual backoff): a backlog too
    // large to read within it would otherwise time out on the same read every round.
    const bool over_budget = absl::IsResourceExhausted(answers.status());
    const bool slow = absl::IsDeadlineExceeded(answers.status());
    shrunk = over_budget && read_count_now > 1;
    if ((over_budget || slow) && read_count_now > 1) {
      read_count_now = std::max<size_t>(1, read_count_now / 2);
      std::lock_guard<std::mutex> lock(mu);
      stats.read_count = static_cast<int64_t>(read_count_now);
      stats.read_shrinks++;
    }
    Failed(answers.status(), std::move(batch));
    return answers.status();
  }
  shrunk = false;
  gone.clear();
  // A refused XADD (a full server, a key of another type): the updates are lost, counted.
  int64_t refused = 0;
  for (size_t i = 0; i < xadds; ++i)
    if ((*answers)[i].type == RespValue::Type::kError) ++refused;
  for (size_t i = 0; i < cmds.size(); ++i)
    if ((*answers)[i].type == RespValue::Type::kError && i >= xadds && i != xread_at) {
      // SET/SADD/SMEMBERS/MGET refused: the server is not usable as configured (ACL, OOM).
      const absl::Status st = absl::FailedPreconditionError(
          absl::StrCat("redis ", conn->where(), ": ", cmds[i][0], " refused: ", (*answers)[i].text));
      Failed(st, {});
      return st;
    }

  // The other replicas' prefix updates, for endpoints this replica routes to.
  const absl::flat_hash_set<std::string> in_pool(pool.begin(), pool.end());
  int64_t applied = 0, ignored = 0, bad = 0;
  size_t entries_read = 0;
  if (!producers.empty()) {
    const RespValue& x = (*answers)[xread_at];
    if (x.type == RespValue::Type::kError) {
      ++bad;
    } else if (x.type == RespValue::Type::kArray) {
      for (const RespValue& stream : x.elements) {
        const RespValue* key = Element(stream, 0);
        const RespValue* items = Element(stream, 1);
        if (key == nullptr || items == nullptr || items->type != RespValue::Type::kArray) continue;
        const std::string prefix = Key("prefix:");
        if (key->text.rfind(prefix, 0) != 0) continue;
        const std::string producer = key->text.substr(prefix.size());
        for (const RespValue& item : items->elements) {
          const RespValue* id = Element(item, 0);
          const RespValue* fields = Element(item, 1);
          if (id == nullptr || fields == nullptr) continue;
          last_id[key->text] = id->text;
          ++entries_read;
          std::string_view from, body;
          for (size_t f = 0; f + 1 < fields->elements.size(); f += 2) {
            if (fields->elements[f].text == "r") from = fields->elements[f + 1].text;
            if (fields->elements[f].text == "b") body = fields->elements[f + 1].text;
          }
          if (from == o.replica_id) continue;
          absl::StatusOr<std::vector<SharedPrefixUpdate>> ups = DecodeSharedPrefixUpdates(body);
          if (!ups.ok()) {
            ++bad;
            continue;
          }
          for (const SharedPrefixUpdate& u : *ups) {
            if (!in_pool.contains(u.endpoint)) {
              ++ignored;
              continue;
            }
            sinks.Deliver(producer, u.endpoint, u.hashes, u.capacity);
            ++applied;
          }
        }
      }
    }
  }
  backlog = entries_read >= read_count_now;
  if (!backlog) read_count_now = o.read_count;

  // The other replicas' counts: a missing key is a replica that stopped refreshing (dead).
  std::vector<RemoteLoad> remote;
  int64_t remote_requests = 0, live = 1;
  if (!asked.empty()) {
    const RespValue& m = (*answers)[mget_at];
    for (size_t i = 0; i < asked.size() && i < m.elements.size(); ++i) {
      const RespValue& v = m.elements[i];
      if (v.type != RespValue::Type::kBulkString) {
        gone.push_back(asked[i]);
        continue;
      }
      ++live;
      for (absl::string_view line : absl::StrSplit(v.text, '\n', absl::SkipEmpty())) {
        std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
        RemoteLoad r;
        if (f.size() != 3 || !absl::SimpleAtoi(f[1], &r.requests) || !absl::SimpleAtoi(f[2], &r.tokens)) {
          ++bad;
          continue;
        }
        r.endpoint = std::string(f[0]);
        if (!in_pool.contains(r.endpoint)) continue;
        remote_requests += r.requests;
        remote.push_back(std::move(r));
      }
    }
  }
  if (sched != nullptr) sched->SetRemoteLoad(remote);
  // The other replicas' attained service per flow, summed per policy and flow.
  if (sharing_services) {
    std::map<std::string, std::map<std::string, double>> services_by_policy;
    if (!asked.empty() && service_mget_at < answers->size()) {
      const RespValue& m = (*answers)[service_mget_at];
      for (const RespValue& v : m.elements) {
        if (v.type != RespValue::Type::kBulkString) continue;  // gone, or sharing nothing
        size_t lines = 0;
        for (absl::string_view line : absl::StrSplit(v.text, '\n', absl::SkipEmpty())) {
          std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
          double value = 0;
          if (++lines > kMaxSharedFlows * 16 || f.size() != 3 || !Shareable(f[0]) || !Shareable(f[1]) ||
              !absl::SimpleAtod(f[2], &value) || !(value > 0) || !std::isfinite(value)) {
            ++bad;
            continue;
          }
          std::map<std::string, double>& flows = services_by_policy[std::string(f[0])];
          if (flows.size() >= kMaxSharedFlows * 4 && !flows.contains(std::string(f[1]))) continue;
          flows[std::string(f[1])] += value;
        }
      }
    }
    DeliverServices(services_by_policy);
  }
  others.clear();
  for (const RespValue& r : (*answers)[members_at].elements)
    if (r.type == RespValue::Type::kBulkString && r.text != o.replica_id) others.push_back(r.text);

  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  bool recovered = false, first = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    recovered = reported_down && connected_once;
    first = !connected_once;
    reported_down = false;
    stats.up = true;
    stats.rounds++;
    stats.published += static_cast<int64_t>(batch.size());
    stats.dropped += refused > 0 ? static_cast<int64_t>(batch.size()) : 0;
    stats.applied += applied;
    stats.ignored += ignored;
    stats.replicas = live;
    stats.remote_requests = remote_requests;
    stats.bytes_sent = static_cast<int64_t>(conn->bytes_sent());
    stats.bytes_received = static_cast<int64_t>(conn->bytes_received());
    stats.last_round_seconds = seconds;
    stats.read_count = static_cast<int64_t>(read_count_now);
    if (bad > 0) stats.last_error = absl::StrCat(bad, " malformed entries from other replicas skipped");
  }
  connected_once = true;
  if (log != nullptr) {
    if (first) log->Info(absl::StrCat("shared state: connected to ", conn->where(), " as replica ", o.replica_id));
    if (recovered) log->Info(absl::StrCat("shared state: ", conn->where(), " answers again; sharing resumed"));
  }
  return absl::OkStatus();
}

void RedisSharedState::Impl::Loop() {
  auto backoff = o.interval;
  for (;;) {
    const auto started = std::chrono::steady_clock::now();
    const absl::Status st = Round();
    std::chrono::steady_clock::duration wait;
    if (st.ok()) {
      backoff = o.interval;
      wait = backlog ? std::chrono::steady_clock::duration::zero() : o.interval - (std::chrono::steady_clock::now() - started);
    } else if (shrunk) {
      wait = std::chrono::steady_clock::duration::zero();  // at once, reading fewer entries
    } else {
      wait = backoff;
      backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::milliseconds(2000));
    }
    std::unique_lock<std::mutex> lock(mu);
    if (cv.wait_for(lock, std::max(wait, std::chrono::steady_clock::duration::zero()), [this] { return stop; })) return;
  }
}

void RedisSharedState::Start(std::function<std::shared_ptr<const Scheduler>()> scheduler,
                             std::function<std::vector<std::string>()> endpoints, const Logger* log) {
  impl_->scheduler = std::move(scheduler);
  impl_->endpoints = std::move(endpoints);
  impl_->log = log;
  impl_->thread = std::thread([this] {
    // (SIGPIPE from a Redis that went away: RedisConnection's writes already keep it away.)
    // Below the request threads: on a busy replica the picks get the CPU first and sharing
    // falls behind (its rounds stretch), never the other way round.
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
    impl_->Loop();
  });
}

absl::Status RedisSharedState::RunRoundForTest() { return impl_->Round(); }

void RedisSharedState::Stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stop) return;
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
  // Leave at once rather than after the expiry: the others stop counting this replica's load.
  if (impl_->conn != nullptr && impl_->conn->ok()) {
    std::vector<std::vector<std::string>> bye{{"DEL", impl_->LoadKey(impl_->o.replica_id)},
                                              {"DEL", impl_->ServiceKey(impl_->o.replica_id)},
                                              {"SREM", impl_->Key("replicas"), impl_->o.replica_id}};
    (void)impl_->conn->Pipeline(bye);
  }
  impl_->conn.reset();
}

}  // namespace epp
