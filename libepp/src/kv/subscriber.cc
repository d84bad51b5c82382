// KvEventSubscriber (kv/subscriber.h) over libzmq's C API: no exceptions on a thread that must
// never stop, and one zmq_poll over every endpoint's SUB socket.
#include "epp/kv/subscriber.h"

#include <zmq.h>

#include <algorithm>
#include <atomic>
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

void SetInt(void* sock, int option, int value) { zmq_setsockopt(sock, option, &value, sizeof value); }

// Receives one multipart message without blocking (or within the socket's receive timeout when
// `block`). nullopt when nothing was there. At most 8 frames are kept; `oversized` tells more came.
std::optional<std::vector<std::string>> ReceiveMultipart(void* sock, bool block, bool& oversized) {
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
  std::atomic<int64_t> central_unknown{0};

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
  }

  // A message on the central socket: to the subscription its topic names.
  void OnCentral(std::vector<std::string>& frames, bool oversized) {
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
    OnMessage(*to, frames, oversized);
  }

  const Logger& log() const { return options.log ? *options.log : NullLogger::Get(); }

  // The per-endpoint mode: a SUB connected to the engine's publisher. libzmq reconnects on its own
  // (100 ms, backing off to 5 s) when the engine restarts; the receive queue is deep enough for
  // a burst of batches, and a message over 64 MiB is refused by libzmq rather than buffered.
  void Open(Sub& s) {
    if (s.spec.address.empty()) {  // fed by the central socket
      s.stats.address = central_bound.empty() ? "central (unbound)" : "central " + central_bound;
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

  // Decodes and applies one batch; false when the payload was skipped.
  bool ApplyBatch(Sub& s, const std::string& topic, uint64_t seq, const std::string& payload) {
    absl::StatusOr<KvEventBatch> batch = DecodeKvEventBatch(payload);
    if (!batch.ok()) {
      s.stats.malformed++;
      s.stats.last_error = absl::StrCat("batch ", seq, ": ", batch.status().message());
      if (s.stats.malformed == 1 || s.stats.malformed % 1000 == 0)
        log().Warn("kv events " + s.spec.endpoint + ": " + s.stats.last_error + " (skipped)");
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
    s.stats.last_seq = static_cast<int64_t>(seq);
    s.stats.last_event_unix_us = UnixMicros();
    s.stats.last_lag_s = static_cast<double>(s.stats.last_event_unix_us) / 1e6 - batch->ts;
    s.stats.last_batch_ts = batch->ts;
    s.have_seq = true;
    s.last_seq = seq;
    return true;
  }

  // Replays from `from` through the endpoint's ROUTER socket, applying each batch in order.
  // True when the end marker arrived. A first batch later than `from` (the engine's buffer no
  // longer holds it) drops the entries first: events were lost.
  // The engine's replay socket answers a DEALER that sends ["", sequence] with its buffered
  // batches from that sequence on, then an end marker (kKvReplayEndSequence).
  bool Replay(Sub& s, uint64_t from) {
    void* d = zmq_socket(ctx, ZMQ_DEALER);
    SetInt(d, ZMQ_LINGER, 0);
    SetInt(d, ZMQ_RCVTIMEO, static_cast<int>(options.replay_timeout.count()));
    SetInt(d, ZMQ_SNDTIMEO, static_cast<int>(options.replay_timeout.count()));
    const int64_t max_msg = int64_t{64} << 20;
    zmq_setsockopt(d, ZMQ_MAXMSGSIZE, &max_msg, sizeof max_msg);
    bool ok = false;
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
            ok = true;
            break;
          }
          if (first && *rs != from) Reset(s, absl::StrCat("replay from ", from, " began at ", *rs));
          first = false;
          if (s.have_seq && *rs <= s.last_seq) continue;
          ApplyBatch(s, topic.empty() ? std::string() : topic, *rs, frames.back());
        }
        if (!ok && why.empty()) why = "timed out";
      }
    }
    zmq_close(d);
    if (ok) {
      s.stats.replays++;
    } else {
      s.stats.replay_failures++;
      s.stats.last_error = "replay from " + std::to_string(from) + " via " + s.spec.replay_address + ": " + why;
      log().Warn("kv events " + s.spec.endpoint + ": " + s.stats.last_error);
    }
    return ok;
  }

  // A live message [topic, sequence, payload]. The publisher numbers its batches from 0, one
  // by one, so the sequence tells a duplicate, a restart (it went back) and lost batches (it
  // jumped); lost ones are fetched from the replay socket when there is one, else the
  // endpoint's entries are dropped, since blocks stored in the missed batches are unknown.
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
    const bool replay = !s.spec.replay_address.empty();
    if (!s.have_seq) {
      // Joining: learn the history the engine still buffers first.
      if (*seq > 0 && replay) Replay(s, 0);
    } else if (*seq == s.last_seq) {
      return;  // duplicate
    } else if (*seq < s.last_seq) {
      Reset(s, absl::StrCat("sequence went back from ", s.last_seq, " to ", *seq, ": the engine restarted"));
      s.have_seq = false;
      if (*seq > 0 && replay) Replay(s, 0);
    } else if (*seq > s.last_seq + 1) {
      s.stats.gaps++;
      const uint64_t from = s.last_seq + 1;
      if (!replay || !Replay(s, from)) Reset(s, absl::StrCat("batches ", from, "..", *seq - 1, " missed"));
    }
    if (s.have_seq && *seq <= s.last_seq) return;  // the replay covered it
    ApplyBatch(s, frames[0], *seq, frames[2]);
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
        std::optional<std::vector<std::string>> frames = ReceiveMultipart(items[i].socket, false, oversized);
        if (!frames) break;
        if (s) OnMessage(*s, *frames, oversized);
        else OnCentral(*frames, oversized);
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

}  // namespace epp
