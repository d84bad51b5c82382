// KvEventSubscriber (kv/subscriber.h) over libzmq's C API: no exceptions on a thread that must
// never stop, and one zmq_poll over every endpoint's SUB socket.
#include "epp/kv/subscriber.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <xxhash.h>
#include <zmq.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "epp/runtime/logger.h"

namespace epp {
namespace {

int64_t UnixMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t SteadyMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void SetInt(void* sock, int option, int value) { zmq_setsockopt(sock, option, &value, sizeof value); }

uint64_t PayloadHash(const std::string& payload) { return XXH3_64bits(payload.data(), payload.size()); }

// An IP address as 16 bytes, IPv4 in its IPv4-mapped IPv6 form, so that "10.0.0.1" and
// "::ffff:10.0.0.1" (what a dual-stack socket reports for an IPv4 peer) compare equal.
using IpBytes = std::array<uint8_t, 16>;

// A numeric address ("10.0.0.1", "fd00::1", "[fd00::1]", a zone "%eth0" ignored); nullopt for
// anything else.
std::optional<IpBytes> ParseIp(std::string_view text) {
  std::string t(text.substr(0, text.find('%')));
  if (t.size() >= 2 && t.front() == '[' && t.back() == ']') t = t.substr(1, t.size() - 2);
  IpBytes out{};
  in_addr v4;
  if (inet_pton(AF_INET, t.c_str(), &v4) == 1) {
    out[10] = out[11] = 0xff;
    std::memcpy(out.data() + 12, &v4, 4);
    return out;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, t.c_str(), &v6) == 1) {
    std::memcpy(out.data(), &v6, 16);
    return out;
  }
  return std::nullopt;
}

// The host of an endpoint's address: "10.0.0.1:8000" -> "10.0.0.1", "[fd00::1]:8000" ->
// "fd00::1", "fd00::1" (several colons, no brackets) as it is when it parses as an address.
std::string EndpointHost(std::string_view ep) {
  if (!ep.empty() && ep.front() == '[') {
    const size_t close = ep.find(']');
    return std::string(close == std::string_view::npos ? ep.substr(1) : ep.substr(1, close - 1));
  }
  const size_t colon = ep.rfind(':');
  if (colon == std::string_view::npos) return std::string(ep);
  if (ep.find(':') != colon && ParseIp(ep)) return std::string(ep);
  return std::string(ep.substr(0, colon));
}

// The addresses an endpoint's host stands for: itself when numeric, else what the resolver
// answers (blocking; called once per subscription). Empty when it does not resolve.
std::vector<IpBytes> ResolveHost(const std::string& host) {
  if (std::optional<IpBytes> ip = ParseIp(host)) return {*ip};
  std::vector<IpBytes> out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (host.empty() || getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return out;
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    char buf[INET6_ADDRSTRLEN + 16];
    if (getnameinfo(a->ai_addr, a->ai_addrlen, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST) != 0) continue;
    if (std::optional<IpBytes> ip = ParseIp(buf); ip && std::find(out.begin(), out.end(), *ip) == out.end())
      out.push_back(*ip);
  }
  freeaddrinfo(res);
  return out;
}

// Receives one multipart message without blocking (or within the socket's receive timeout when
// `block`). nullopt when nothing was there. At most 8 frames are kept; `oversized` tells more came.
// `peer`, when given, gets the sending peer's IP address as libzmq reports it for TCP ("" when it
// reports none).
std::optional<std::vector<std::string>> ReceiveMultipart(void* sock, bool block, bool& oversized,
                                                         std::string* peer = nullptr) {
  std::vector<std::string> frames;
  oversized = false;
  for (;;) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    const int n = zmq_msg_recv(&msg, sock, block ? 0 : ZMQ_DONTWAIT);
    if (n < 0) {
      zmq_msg_close(&msg);
      if (frames.empty()) return std::nullopt;
      oversized = true;  // a message cut short (should not happen: parts arrive together)
      return frames;
    }
    if (peer && frames.empty()) {
      const char* address = zmq_msg_gets(&msg, "Peer-Address");
      *peer = address ? address : "";
    }
    if (frames.size() < 8) frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    else oversized = true;
    const bool more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
    if (!more) return frames;
    block = true;  // the rest of a started message is already here
  }
}

}  // namespace

// One thread (or PollOnce's caller) owns the sockets and the per-endpoint sequence state; other
// threads only hand in a new subscription list (`pending`, taken at the next poll) and read a
// copy of the counters (`published`), so no lock is held while messages are applied.
struct KvEventSubscriber::Impl {
  struct Sub {
    KvSubscription spec;
    void* sock = nullptr;
    bool have_seq = false;
    uint64_t last_seq = 0;
    uint64_t last_hash = 0;  // of the last applied batch's payload: a replay of it must match
    // A batch that did not continue the stream while the engine could not be asked: applied
    // only when the next batch continues it (OnMessage).
    struct Held {
      uint64_t seq;
      std::string topic, payload;
    };
    std::optional<Held> held;
    std::vector<IpBytes> peers;  // central, verified: the addresses its endpoint stands for
    KvEndpointStats stats;
  };

  KvBlockIndex* index;
  KvSubscriberOptions options;
  void* ctx = nullptr;
  std::vector<std::unique_ptr<Sub>> subs;  // the subscriber thread's (or PollOnce's caller's)

  std::mutex pending_mu;
  std::optional<std::vector<KvSubscription>> pending;

  mutable std::mutex stats_mu;
  std::vector<KvEndpointStats> published;  // copy for Stats()

  std::thread thread;
  std::atomic<bool> stop{false};

  void* central = nullptr;  // SUB bound at options.central_endpoint
  std::string central_bound, central_err;
  bool verify_peers = false;  // verify_peer_address on a tcp:// central socket
  std::atomic<int64_t> central_unknown{0}, central_peer_mismatch{0}, central_peer_unverifiable{0};
  // Per sending peer: when its next drop may be logged, and the drops since its last report.
  struct PeerLog {
    int64_t next_us = 0;
    int64_t suppressed = 0;
  };
  std::map<std::string, PeerLog> peer_logs;

  // The central mode (llm-d's zmqEndpoint): the EPP binds one SUB socket and every engine's
  // publisher connects to it; a message's topic says which endpoint it is from (OnCentral).
  void BindCentral() {
    if (options.central_endpoint.empty()) return;
    central = zmq_socket(ctx, ZMQ_SUB);
    SetInt(central, ZMQ_LINGER, 0);
    SetInt(central, ZMQ_RCVHWM, 100000);
    const int64_t max_msg = int64_t{64} << 20;
    zmq_setsockopt(central, ZMQ_MAXMSGSIZE, &max_msg, sizeof max_msg);
    zmq_setsockopt(central, ZMQ_SUBSCRIBE, options.topic_filter.data(), options.topic_filter.size());
    if (zmq_bind(central, options.central_endpoint.c_str()) != 0) {
      central_err = absl::StrCat("cannot bind ", options.central_endpoint, ": ", zmq_strerror(zmq_errno()));
      log().Warn("kv events central socket: " + central_err);
      zmq_close(central);
      central = nullptr;
      return;
    }
    char buf[256];
    size_t n = sizeof buf;
    central_bound = zmq_getsockopt(central, ZMQ_LAST_ENDPOINT, buf, &n) == 0 ? std::string(buf) : options.central_endpoint;
    verify_peers = options.verify_peer_address && options.central_endpoint.rfind("tcp://", 0) == 0;
  }

  // A dropped central message, logged at most once a minute per sending peer (a flood from one
  // address must not flood the log), with the count of those not logged.
  void LogPeerDrop(const std::string& peer, const std::string& endpoint, const std::string& why) {
    if (peer_logs.size() >= 1024 && !peer_logs.contains(peer)) peer_logs.clear();
    PeerLog& l = peer_logs[peer];
    const int64_t now = SteadyMicros();
    if (now < l.next_us) {
      ++l.suppressed;
      return;
    }
    log().Warn(absl::StrCat("kv events central socket: dropped a message for ", endpoint, " from ",
                            peer.empty() ? std::string("an unknown address") : peer, ": ", why,
                            l.suppressed > 0 ? absl::StrCat(" (and ", l.suppressed, " more from it since the last report)")
                                             : std::string(),
                            "; see kvEventsConfig.verifyPeerAddress"));
    l.suppressed = 0;
    l.next_us = now + 60'000'000;
  }

  // A message on the central socket: to the subscription its topic names, when its sender is
  // that endpoint (verify_peers). The topic alone would let anyone who reaches the socket speak
  // for any endpoint.
  void OnCentral(std::vector<std::string>& frames, bool oversized, const std::string& peer) {
    std::optional<KvTopic> t;
    if (!frames.empty()) t = ParseKvTopic(frames[0]);
    Sub* to = nullptr;
    if (t)
      for (auto& s : subs)
        if (s->spec.address.empty() && s->spec.endpoint == t->endpoint) to = s.get();
    if (!to) {
      if (central_unknown.fetch_add(1) == 0)
        log().Warn("kv events central socket: a message for no endpoint of the pool (topic '" +
                   (frames.empty() ? std::string() : frames[0].substr(0, 200)) + "')");
      return;
    }
    if (verify_peers) {
      const std::optional<IpBytes> from = ParseIp(peer);
      if (!from || std::find(to->peers.begin(), to->peers.end(), *from) == to->peers.end()) {
        to->stats.peer_rejected++;
        if (!from || to->peers.empty()) {
          central_peer_unverifiable++;
          LogPeerDrop(peer, to->spec.endpoint,
                      !from ? "libzmq gave no address for the sender"
                            : "the endpoint's host '" + EndpointHost(to->spec.endpoint) + "' did not resolve to an address");
        } else {
          central_peer_mismatch++;
          LogPeerDrop(peer, to->spec.endpoint, "the sender's address is not the endpoint's");
        }
        return;
      }
    }
    OnMessage(*to, frames, oversized);
  }

  const Logger& log() const { return options.log ? *options.log : NullLogger::Get(); }

  // The per-endpoint mode: a SUB connected to the engine's publisher. libzmq reconnects on its own
  // (100 ms, backing off to 5 s) when the engine restarts; the receive queue is deep enough for
  // a burst of batches, and a message over 64 MiB is refused by libzmq rather than buffered.
  void Open(Sub& s) {
    if (s.spec.address.empty()) {  // fed by the central socket
      s.stats.address = central_bound.empty() ? "central (unbound)" : "central " + central_bound;
      if (verify_peers) {
        s.peers = ResolveHost(EndpointHost(s.spec.endpoint));
        if (s.peers.empty()) {
          s.stats.last_error = "its host '" + EndpointHost(s.spec.endpoint) +
                               "' does not resolve: its messages on the central socket cannot be verified and are dropped";
          log().Warn("kv events " + s.spec.endpoint + ": " + s.stats.last_error);
        }
      }
      return;
    }
    s.sock = zmq_socket(ctx, ZMQ_SUB);
    SetInt(s.sock, ZMQ_LINGER, 0);
    SetInt(s.sock, ZMQ_RCVHWM, 100000);
    SetInt(s.sock, ZMQ_RECONNECT_IVL, 100);
    SetInt(s.sock, ZMQ_RECONNECT_IVL_MAX, 5000);
    const int64_t max_msg = int64_t{64} << 20;
    zmq_setsockopt(s.sock, ZMQ_MAXMSGSIZE, &max_msg, sizeof max_msg);
    zmq_setsockopt(s.sock, ZMQ_SUBSCRIBE, options.topic_filter.data(), options.topic_filter.size());
    if (zmq_connect(s.sock, s.spec.address.c_str()) != 0) {
      s.stats.last_error = absl::StrCat("cannot connect to ", s.spec.address, ": ", zmq_strerror(zmq_errno()));
      log().Warn("kv events " + s.spec.endpoint + ": " + s.stats.last_error);
    }
  }
  void Close(Sub& s) {
    if (s.sock) zmq_close(s.sock);
    s.sock = nullptr;
  }

  void ApplyPending() {
    std::optional<std::vector<KvSubscription>> next;
    {
      std::lock_guard<std::mutex> lock(pending_mu);
      next.swap(pending);
    }
    if (!next) return;
    std::vector<std::unique_ptr<Sub>> kept;
    for (const KvSubscription& spec : *next) {
      auto it = std::find_if(subs.begin(), subs.end(), [&](const auto& s) { return s && s->spec == spec; });
      if (it != subs.end()) {
        kept.push_back(std::move(*it));
        continue;
      }
      auto s = std::make_unique<Sub>();
      s->spec = spec;
      s->stats.endpoint = spec.endpoint;
      s->stats.address = spec.address;
      // A changed subscription for an endpoint starts over: what it held came from the old one.
      // An endpoint new to this subscriber keeps what the index holds for it: nothing, or what
      // the index's copy in Redis restored at start (redisConfig), which its events then update.
      const bool changed = std::any_of(subs.begin(), subs.end(),
                                       [&](const auto& o) { return o && o->spec.endpoint == spec.endpoint; });
      if (changed) index->ClearEndpoint(spec.endpoint);
      Open(*s);
      // What the engine published before this subscription (or while the SUB connects) comes
      // from its replay buffer; live batches continue from there.
      if (!spec.replay_address.empty()) Replay(*s, 0);
      kept.push_back(std::move(s));
    }
    for (auto& s : subs) {
      if (!s) continue;
      Close(*s);
      const bool still = std::any_of(kept.begin(), kept.end(), [&](const auto& k) { return k->spec.endpoint == s->spec.endpoint; });
      if (!still) index->ClearEndpoint(s->spec.endpoint);
    }
    subs = std::move(kept);
    Publish();
  }

  // Counters for Stats(), copied under their own lock after each round that changed them.
  void Publish() {
    std::vector<KvEndpointStats> copy;
    copy.reserve(subs.size());
    for (const auto& s : subs) copy.push_back(s->stats);
    std::lock_guard<std::mutex> lock(stats_mu);
    published = std::move(copy);
  }

  // The index can no longer trust what it holds for this endpoint (events were lost, or the
  // engine restarted): drop it all; new events rebuild it.
  void Reset(Sub& s, const std::string& why) {
    index->ClearEndpoint(s.spec.endpoint);
    s.stats.resets++;
    log().Info("kv events " + s.spec.endpoint + ": entries dropped (" + why + ")");
  }

  void CountMalformed(Sub& s, uint64_t seq, const absl::Status& status) {
    s.stats.malformed++;
    s.stats.last_error = absl::StrCat("batch ", seq, ": ", status.message());
    if (s.stats.malformed == 1 || s.stats.malformed % 1000 == 0)
      log().Warn("kv events " + s.spec.endpoint + ": " + s.stats.last_error + " (skipped)");
  }

  // Decodes and applies one batch; false when the payload was skipped.
  bool ApplyBatch(Sub& s, const std::string& topic, uint64_t seq, const std::string& payload) {
    absl::StatusOr<KvEventBatch> batch = DecodeKvEventBatch(payload);
    if (!batch.ok()) {
      CountMalformed(s, seq, batch.status());
      return false;
    }
    std::string model = s.spec.model;
    if (model.empty())
      if (std::optional<KvTopic> t = ParseKvTopic(topic)) model = t->model;
    const KvApplyResult r = index->Apply(s.spec.endpoint, model, *batch);
    s.stats.batches++;
    s.stats.events += static_cast<int64_t>(batch->events.size());
    s.stats.skipped_events += r.skipped;
    if (r.skipped > 0) s.stats.last_error = r.last_skip;
    if (r.cleared > 0) s.stats.resets += r.cleared;
    s.stats.removed_unknown += r.removed_unknown;
    s.stats.last_seq = static_cast<int64_t>(seq);
    s.stats.last_event_unix_us = UnixMicros();
    s.stats.last_lag_s = static_cast<double>(s.stats.last_event_unix_us) / 1e6 - batch->ts;
    s.stats.last_batch_ts = batch->ts;
    s.have_seq = true;
    s.last_seq = seq;
    s.last_hash = PayloadHash(payload);
    return true;
  }

  // How a replay went: completed (the end marker came), failed (no answer, a bad reply), or, for
  // a check of the stream (Replay with `check`), the engine's stream is another one than the one
  // applied so far.
  enum class ReplayResult { kDone, kFailed, kOtherStream };

  // Replays from `from` through the endpoint's ROUTER socket, applying each batch in order.
  // A first batch later than `from` (the engine's buffer no longer holds it) drops the entries
  // first: events were lost.
  // With `check` (from == last applied sequence), the first answer also tells whether the engine
  // is still the publisher whose batches were applied: it still buffers that batch with the same
  // bytes (then the later ones are applied), or it answers nothing from there on or another batch
  // at that number: it restarted (kOtherStream; nothing applied).
  // The engine's replay socket answers a DEALER that sends ["", sequence] with its buffered
  // batches from that sequence on, then an end marker (kKvReplayEndSequence).
  ReplayResult Replay(Sub& s, uint64_t from, bool check = false) {
    void* d = zmq_socket(ctx, ZMQ_DEALER);
    SetInt(d, ZMQ_LINGER, 0);
    SetInt(d, ZMQ_RCVTIMEO, static_cast<int>(options.replay_timeout.count()));
    SetInt(d, ZMQ_SNDTIMEO, static_cast<int>(options.replay_timeout.count()));
    const int64_t max_msg = int64_t{64} << 20;
    zmq_setsockopt(d, ZMQ_MAXMSGSIZE, &max_msg, sizeof max_msg);
    ReplayResult result = ReplayResult::kFailed;
    std::string why;
    if (zmq_connect(d, s.spec.replay_address.c_str()) != 0) {
      why = absl::StrCat("cannot connect: ", zmq_strerror(zmq_errno()));
    } else {
      const std::string seq = EncodeKvSequence(from);
      if (zmq_send(d, "", 0, ZMQ_SNDMORE) < 0 || zmq_send(d, seq.data(), seq.size(), 0) < 0) {
        why = "cannot send the request";
      } else {
        const auto deadline = std::chrono::steady_clock::now() + options.replay_timeout;
        bool first = true;
        while (std::chrono::steady_clock::now() < deadline) {
          bool oversized = false;
          std::optional<std::vector<std::string>> f = ReceiveMultipart(d, true, oversized);
          if (!f) {
            why = "timed out";
            break;
          }
          std::vector<std::string>& frames = *f;
          if (!frames.empty() && frames.front().empty()) frames.erase(frames.begin());  // DEALER's delimiter
          // [topic, seq, payload] (vLLM 0.26 on) or [seq, payload] (older engines, SGLang).
          std::string topic;
          if (frames.size() == 3) topic = frames[0];
          if (frames.size() != 2 && frames.size() != 3) {
            why = absl::StrCat("a reply of ", frames.size(), " frames");
            break;
          }
          const std::optional<uint64_t> rs = DecodeKvSequence(frames[frames.size() - 2]);
          if (!rs) {
            why = "a reply whose sequence frame is not 8 bytes";
            break;
          }
          if (*rs == kKvReplayEndSequence) {
            // Checking: nothing at or after our last sequence, which the engine would still
            // buffer had it not restarted (its numbers start from 0 again).
            result = check && first ? ReplayResult::kOtherStream : ReplayResult::kDone;
            break;
          }
          if (first && check && *rs == from && PayloadHash(frames.back()) != s.last_hash) {
            result = ReplayResult::kOtherStream;  // another batch under our last number: a new process
            break;
          }
          if (first && *rs != from) Reset(s, absl::StrCat("replay from ", from, " began at ", *rs));
          first = false;
          if (s.have_seq && *rs <= s.last_seq) continue;
          ApplyBatch(s, topic.empty() ? std::string() : topic, *rs, frames.back());
        }
        if (result == ReplayResult::kFailed && why.empty()) why = "timed out";
      }
    }
    zmq_close(d);
    if (result == ReplayResult::kDone) {
      s.stats.replays++;
    } else if (result == ReplayResult::kFailed) {
      s.stats.replay_failures++;
      s.stats.last_error = "replay from " + std::to_string(from) + " via " + s.spec.replay_address + ": " + why;
      log().Warn("kv events " + s.spec.endpoint + ": " + s.stats.last_error);
    }
    return result;
  }

  // A message dropped because its sequence did not continue the engine's stream.
  void Reject(Sub& s, uint64_t seq, const std::string& why) {
    s.stats.seq_rejected++;
    s.stats.last_error = absl::StrCat("batch ", seq, " dropped: ", why);
    if (s.stats.seq_rejected == 1 || s.stats.seq_rejected % 1000 == 0)
      log().Warn("kv events " + s.spec.endpoint + ": " + s.stats.last_error);
  }

  // A live message [topic, sequence, payload]. The publisher numbers its batches from 0, one by
  // one, so the sequence tells a duplicate, the next batch, and a discontinuity: lost batches
  // (it jumped) or a restart (it went back, or the replay socket holds another stream). A
  // discontinuity is never taken from one message alone: the engine's replay socket is asked,
  // or, without one, the message waits for the batch after it (the rule in kv/subscriber.h).
  void OnMessage(Sub& s, std::vector<std::string>& frames, bool oversized) {
    std::optional<uint64_t> seq;
    if (!oversized && frames.size() == 3) seq = DecodeKvSequence(frames[1]);
    if (!seq) {
      s.stats.malformed++;
      s.stats.last_error = absl::StrCat("a message of ", frames.size(), oversized ? "+" : "",
                                        " frames, expected [topic, 8-byte sequence, payload]");
      if (s.stats.malformed == 1) log().Warn("kv events " + s.spec.endpoint + ": " + s.stats.last_error + " (skipped)");
      return;
    }
    const uint64_t q = *seq;
    const bool replay = !s.spec.replay_address.empty();
    if (!s.have_seq) {
      // Joining: learn the history the engine still buffers first.
      if (q > 0 && replay) Replay(s, 0);
      if (s.have_seq && q <= s.last_seq) return;  // the replay covered it
      ApplyBatch(s, frames[0], q, frames[2]);
      return;
    }
    if (q == s.last_seq || (s.held && q == s.held->seq)) return;  // a duplicate
    if (q == s.last_seq + 1) {  // the stream goes on
      if (s.held) Reject(s, s.held->seq, absl::StrCat("the stream went on from ", s.last_seq, " without it"));
      s.held.reset();
      ApplyBatch(s, frames[0], q, frames[2]);
      return;
    }
    if (s.held && q == s.held->seq + 1) {
      // The held batch's stream goes on: a real restart (or gap), confirmed by a second batch.
      const Sub::Held h = std::move(*s.held);
      s.held.reset();
      Reset(s, h.seq < s.last_seq ? absl::StrCat("sequence went back from ", s.last_seq, " to ", h.seq,
                                                 " and went on: the engine restarted")
                                  : absl::StrCat("batches ", s.last_seq + 1, "..", h.seq - 1, " missed"));
      s.have_seq = false;
      ApplyBatch(s, h.topic, h.seq, h.payload);
      ApplyBatch(s, frames[0], q, frames[2]);
      return;
    }
    // A discontinuity: a gap, or a sequence that went back. A payload that does not decode
    // could never be applied: skipped before anything is asked or held.
    if (absl::StatusOr<KvEventBatch> b = DecodeKvEventBatch(frames[2]); !b.ok()) {
      CountMalformed(s, q, b.status());
      return;
    }
    const uint64_t last = s.last_seq;
    if (q > last) s.stats.gaps++;
    if (replay) {
      switch (Replay(s, last, /*check=*/true)) {
        case ReplayResult::kDone:
          // The same engine, and the replay brought every batch it published up to now: a real
          // gap is filled (with the engine's own copies); a batch it never published is not its.
          if (q < last) Reject(s, q, absl::StrCat("sequence went back from ", last, ", but the engine's replay socket still holds ", last, " unchanged"));
          else if (q > s.last_seq) Reject(s, q, absl::StrCat("the engine's replay socket ends at ", s.last_seq));
          s.held.reset();
          return;
        case ReplayResult::kOtherStream:
          Reset(s, absl::StrCat("sequence went from ", last, " to ", q,
                                " and the engine's replay socket no longer holds batch ", last, ": the engine restarted"));
          s.have_seq = false;
          s.held.reset();
          if (q > 0) Replay(s, 0);
          if (s.have_seq && q <= s.last_seq) return;  // the new history covered it
          ApplyBatch(s, frames[0], q, frames[2]);
          return;
        case ReplayResult::kFailed:
          break;  // cannot ask: as without a replay socket
      }
    }
    if (s.held) Reject(s, s.held->seq, absl::StrCat("batch ", q, " came next instead of ", s.held->seq + 1));
    s.held = Sub::Held{q, frames[0], frames[2]};
    log().Info(absl::StrCat("kv events ", s.spec.endpoint, ": batch ", q, " does not follow ", last,
                            "; held until the next batch confirms a restart or gap"));
  }

  // One round: take a new subscription list if one was given, wait up to `wait` on every socket
  // at once, then drain what arrived.
  void Poll(std::chrono::milliseconds wait) {
    ApplyPending();
    std::vector<zmq_pollitem_t> items;
    std::vector<Sub*> owners;  // per item; nullptr: the central socket
    items.reserve(subs.size() + 1);
    for (auto& s : subs) {
      if (!s->sock) continue;
      items.push_back(zmq_pollitem_t{s->sock, 0, ZMQ_POLLIN, 0});
      owners.push_back(s.get());
    }
    if (central) {
      items.push_back(zmq_pollitem_t{central, 0, ZMQ_POLLIN, 0});
      owners.push_back(nullptr);
    }
    if (items.empty()) {
      std::this_thread::sleep_for(wait);
      return;
    }
    if (zmq_poll(items.data(), static_cast<int>(items.size()), static_cast<long>(wait.count())) <= 0) return;
    bool changed = false;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      Sub* s = owners[i];
      for (int k = 0; k < 4096; ++k) {  // bounded per round, so one busy server cannot starve the rest
        bool oversized = false;
        std::string peer;
        std::optional<std::vector<std::string>> frames =
            ReceiveMultipart(items[i].socket, false, oversized, s ? nullptr : &peer);
        if (!frames) break;
        if (s) OnMessage(*s, *frames, oversized);
        else OnCentral(*frames, oversized, peer);
        changed = true;
      }
    }
    if (changed) Publish();
  }
};

KvEventSubscriber::KvEventSubscriber(KvBlockIndex* index, KvSubscriberOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->index = index;
  impl_->options = std::move(options);
  impl_->ctx = zmq_ctx_new();
  zmq_ctx_set(impl_->ctx, ZMQ_IO_THREADS, 1);
  impl_->BindCentral();
}

KvEventSubscriber::~KvEventSubscriber() {
  Stop();
  for (auto& s : impl_->subs) impl_->Close(*s);
  if (impl_->central) zmq_close(impl_->central);
  zmq_ctx_term(impl_->ctx);
}

void KvEventSubscriber::SetSubscriptions(std::vector<KvSubscription> subscriptions) {
  std::lock_guard<std::mutex> lock(impl_->pending_mu);
  impl_->pending = std::move(subscriptions);
}

void KvEventSubscriber::Start() {
  if (impl_->thread.joinable()) return;
  impl_->stop = false;
  impl_->thread = std::thread([m = impl_.get()] {
    while (!m->stop.load()) m->Poll(std::chrono::milliseconds(50));
  });
}

void KvEventSubscriber::Stop() {
  impl_->stop = true;
  if (impl_->thread.joinable()) impl_->thread.join();
}

void KvEventSubscriber::PollOnce(std::chrono::milliseconds wait) { impl_->Poll(wait); }

std::vector<KvEndpointStats> KvEventSubscriber::Stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mu);
  return impl_->published;
}

KvBlockIndex* KvEventSubscriber::index() const { return impl_->index; }
std::string KvEventSubscriber::central_address() const { return impl_->central_bound; }
std::string KvEventSubscriber::central_error() const { return impl_->central_err; }
int64_t KvEventSubscriber::central_unknown() const { return impl_->central_unknown.load(); }
KvCentralStats KvEventSubscriber::central_stats() const {
  KvCentralStats c;
  c.unknown_endpoint = impl_->central_unknown.load();
  c.peer_mismatch = impl_->central_peer_mismatch.load();
  c.peer_unverifiable = impl_->central_peer_unverifiable.load();
  return c;
}

}  // namespace epp
