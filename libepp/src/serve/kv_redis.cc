// The precise index's copy in Redis (see epp/runtime/kv_redis.h).
#include "epp/runtime/kv_redis.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "epp/runtime/logger.h"
#include "epp/runtime/redis.h"

namespace epp {

namespace {

// Go's encoding/json of llm-d's PodEntry (field order as declared; the strings escaped as Go
// escapes them: nlohmann's escaping of control characters and quotes matches for the endpoint
// and medium names engines and pods have).
std::string PodEntryJson(const std::string& pod, const std::string& tier) {
  return absl::StrCat("{\"PodIdentifier\":", nlohmann::json(pod).dump(), ",\"DeviceTier\":", nlohmann::json(tier).dump(),
                      ",\"Speculative\":false,\"HasGroup\":false,\"GroupIdx\":0}");
}

}  // namespace

std::string KvRedisMirror::Field(const KvHolderRecord& h) { return PodEntryJson(h.endpoint, h.medium); }

std::string KvRedisMirror::Value(const KvHolderRecord& h) { return absl::StrCat(h.block_size, ":", h.engine_hash); }

std::optional<KvHolderRecord> KvRedisMirror::Parse(std::string_view key, std::string_view field, std::string_view value) {
  KvHolderRecord h;
  if (!absl::SimpleAtoi(absl::string_view(key.data(), key.size()), &h.key) || h.key == 0) return std::nullopt;
  const size_t colon = value.find(':');
  if (colon == std::string_view::npos) return std::nullopt;  // llm-d's own entry (empty value): not ours
  if (!absl::SimpleAtoi(absl::string_view(value.data(), colon), &h.block_size) ||
      !absl::SimpleAtoi(absl::string_view(value.data() + colon + 1, value.size() - colon - 1), &h.engine_hash))
    return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(field, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  auto pod = j.find("PodIdentifier");
  auto tier = j.find("DeviceTier");
  if (pod == j.end() || !pod->is_string() || tier == j.end() || !tier->is_string()) return std::nullopt;
  if (auto spec = j.find("Speculative"); spec != j.end() && spec->is_boolean() && spec->get<bool>()) return std::nullopt;
  h.endpoint = pod->get<std::string>();
  h.medium = tier->get<std::string>();
  if (h.endpoint.empty() || h.block_size <= 0) return std::nullopt;
  return h;
}

struct KvRedisMirror::Impl {
  KvRedisOptions o;
  RedisAddress address;
  std::shared_ptr<KvBlockIndex> index;
  const Logger* log = nullptr;

  mutable std::mutex mu;
  std::deque<KvHolderChange> pending;  // under mu
  KvRedisStats stats;                  // under mu
  bool stop = false;                   // under mu
  bool reported_down = false;
  std::condition_variable cv;
  std::thread thread;
  std::unique_ptr<RedisConnection> conn;  // the thread's (or Load's, before Start)

  absl::Status Connect() {
    if (conn && conn->ok()) return absl::OkStatus();
    RedisConnectOptions co;
    co.connect_timeout = o.timeout;
    co.io_timeout = o.timeout;
    EPP_ASSIGN_OR_RETURN(conn, RedisConnection::Connect(address, co));
    return absl::OkStatus();
  }
  void Failed(const absl::Status& st) {
    conn.reset();
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      stats.up = false;
      stats.errors++;
      stats.last_error = std::string(st.message());
      first = !reported_down;
      reported_down = true;
    }
    if (first && log != nullptr)
      log->Warn(absl::StrCat("kv index copy: ", st.message(), "; changes queue until Redis answers again"));
  }
  // Sends up to a round's worth of queued changes; false when Redis failed.
  bool Round() {
    std::vector<KvHolderChange> batch;
    {
      std::lock_guard<std::mutex> lock(mu);
      const size_t n = std::min<size_t>(pending.size(), 20000);
      batch.assign(std::make_move_iterator(pending.begin()), std::make_move_iterator(pending.begin() + static_cast<long>(n)));
      pending.erase(pending.begin(), pending.begin() + static_cast<long>(n));
    }
    if (batch.empty()) return true;
    if (absl::Status st = Connect(); !st.ok()) {
      Requeue(std::move(batch));
      Failed(st);
      return false;
    }
    std::vector<std::vector<std::string>> cmds;
    cmds.reserve(batch.size());
    for (const KvHolderChange& c : batch) {
      const std::string key = absl::StrCat(o.key_prefix, c.holder.key);
      if (c.stored) {
        cmds.push_back({"HSET", key, Field(c.holder), Value(c.holder)});
      } else {
        cmds.push_back({"HDEL", key, Field(c.holder)});
      }
    }
    absl::StatusOr<std::vector<RespValue>> answers = conn->Pipeline(cmds);
    if (!answers.ok()) {
      Requeue(std::move(batch));
      Failed(answers.status());
      return false;
    }
    bool recovered = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      recovered = reported_down;
      reported_down = false;
      stats.up = true;
      stats.rounds++;
      stats.written += static_cast<int64_t>(batch.size());
      for (const RespValue& v : *answers)
        if (v.type == RespValue::Type::kError) stats.last_error = v.text;
    }
    if (recovered && log != nullptr) log->Info("kv index copy: Redis answers again; the queued changes were sent");
    return true;
  }
  void Requeue(std::vector<KvHolderChange> batch) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto it = batch.rbegin(); it != batch.rend(); ++it) {
      if (pending.size() >= o.max_pending) {
        stats.dropped++;
        continue;
      }
      pending.push_front(std::move(*it));
    }
  }
};

absl::StatusOr<std::unique_ptr<KvRedisMirror>> KvRedisMirror::Create(KvRedisOptions options,
                                                                    std::shared_ptr<KvBlockIndex> index,
                                                                    const Logger* log) {
  auto impl = std::make_unique<Impl>();
  EPP_ASSIGN_OR_RETURN(impl->address, ParseRedisAddress(options.address));
  if (options.interval.count() <= 0 || options.timeout.count() <= 0)
    return absl::InvalidArgumentError("kv index copy: interval and timeout must be > 0");
  options.scan_count = std::max<size_t>(1, options.scan_count);
  impl->o = std::move(options);
  impl->index = std::move(index);
  impl->log = log;
  return std::unique_ptr<KvRedisMirror>(new KvRedisMirror(std::move(impl)));
}

KvRedisMirror::KvRedisMirror(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

KvRedisMirror::~KvRedisMirror() { Stop(); }

std::string KvRedisMirror::redacted_address() const { return impl_->address.Redacted(); }

KvRedisStats KvRedisMirror::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

absl::StatusOr<size_t> KvRedisMirror::Load() {
  Impl& m = *impl_;
  const auto deadline = std::chrono::steady_clock::now() + m.o.load_timeout;
  if (absl::Status st = m.Connect(); !st.ok()) {
    m.Failed(st);
    return st;
  }
  std::vector<KvHolderRecord> holders;
  int64_t malformed = 0;
  std::string cursor = "0";
  const std::string match = m.o.key_prefix + "*";
  do {
    if (std::chrono::steady_clock::now() > deadline) {
      const absl::Status st = absl::DeadlineExceededError(
          absl::StrCat("kv index copy: reading ", m.address.Redacted(), " took longer than ",
                       m.o.load_timeout.count(), " ms; ", holders.size(), " holders read so far are used"));
      if (m.log != nullptr) m.log->Warn(std::string(st.message()));
      break;
    }
    absl::StatusOr<RespValue> scan =
        m.conn->Command({"SCAN", cursor, "MATCH", match, "COUNT", std::to_string(m.o.scan_count)});
    if (!scan.ok()) {
      m.Failed(scan.status());
      return scan.status();
    }
    if (scan->type != RespValue::Type::kArray || scan->elements.size() != 2)
      return absl::InternalError("kv index copy: SCAN answered something that is not [cursor, keys]");
    cursor = scan->elements[0].text;
    std::vector<std::string> keys;
    for (const RespValue& k : scan->elements[1].elements) {
      std::string_view name = k.text;
      name.remove_prefix(std::min(name.size(), m.o.key_prefix.size()));
      if (name.rfind("engine:", 0) == 0) continue;  // llm-d's engine sets
      keys.push_back(k.text);
    }
    if (keys.empty()) continue;
    std::vector<std::vector<std::string>> cmds;
    for (const std::string& k : keys) cmds.push_back({"HGETALL", k});
    absl::StatusOr<std::vector<RespValue>> all = m.conn->Pipeline(cmds);
    if (!all.ok()) {
      m.Failed(all.status());
      return all.status();
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      const RespValue& v = (*all)[i];
      if (v.type != RespValue::Type::kArray) {  // another kind of key in the database
        ++malformed;
        continue;
      }
      const std::string_view name = std::string_view(keys[i]).substr(m.o.key_prefix.size());
      for (size_t f = 0; f + 1 < v.elements.size(); f += 2) {
        std::optional<KvHolderRecord> h = Parse(name, v.elements[f].text, v.elements[f + 1].text);
        if (h) {
          holders.push_back(*std::move(h));
        } else {
          ++malformed;
        }
      }
    }
  } while (cursor != "0");
  const size_t restored = m.index->Restore(holders);
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.stats.loaded = static_cast<int64_t>(restored);
    m.stats.up = true;
    if (malformed > 0) m.stats.last_error = absl::StrCat(malformed, " entries skipped at load (not epp's, or malformed)");
  }
  if (m.log != nullptr)
    m.log->Info(absl::StrCat("kv index copy: ", restored, " holders restored from ", m.address.Redacted(),
                             malformed > 0 ? absl::StrCat(" (", malformed, " entries skipped)") : std::string()));
  return restored;
}

void KvRedisMirror::Start() {
  Impl& m = *impl_;
  Impl* raw = impl_.get();
  m.index->SetChangeObserver([raw](std::span<const KvHolderChange> changes) {
    std::lock_guard<std::mutex> lock(raw->mu);
    for (const KvHolderChange& c : changes) {
      if (raw->pending.size() >= raw->o.max_pending) {
        raw->pending.pop_front();
        raw->stats.dropped++;
      }
      raw->pending.push_back(c);
    }
  });
  m.thread = std::thread([raw] {
    auto backoff = raw->o.interval;
    for (;;) {
      bool more = false;
      const bool ok = raw->Round();
      {
        std::lock_guard<std::mutex> lock(raw->mu);
        more = ok && !raw->pending.empty();
      }
      backoff = ok ? raw->o.interval : std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::milliseconds(2000));
      std::unique_lock<std::mutex> lock(raw->mu);
      if (raw->cv.wait_for(lock, more ? std::chrono::milliseconds(0) : backoff, [raw] { return raw->stop; })) return;
    }
  });
}

void KvRedisMirror::Stop() {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (m.stop) return;
    m.stop = true;
  }
  m.cv.notify_all();
  if (m.thread.joinable()) {
    m.thread.join();
    m.index->SetChangeObserver(nullptr);
    (void)m.Round();  // what the last changes queued
  }
  m.conn.reset();
}

}  // namespace epp
