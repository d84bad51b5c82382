// KvEventPublisher (kv/publisher.h): one thread owns the PUB and ROUTER sockets (ZeroMQ sockets
// are not thread-safe); Publish() only queues.
#include "epp/kv/publisher.h"

#include <zmq.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"

namespace epp {
namespace {

void SetInt(void* sock, int option, int value) { zmq_setsockopt(sock, option, &value, sizeof value); }

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// "tcp://host:0" -> "tcp://host:*" (ZeroMQ's wildcard port).
std::string BindAddress(const std::string& a) {
  if (a.size() > 2 && a.compare(a.size() - 2, 2, ":0") == 0) return a.substr(0, a.size() - 1) + "*";
  return a;
}

std::string LastEndpoint(void* sock) {
  char buf[256];
  size_t len = sizeof buf;
  if (zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, buf, &len) != 0 || len == 0) return "";
  return std::string(buf, strnlen(buf, len));
}

bool SendFrames(void* sock, const std::vector<std::string>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    const int flags = (i + 1 < frames.size() ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT;
    if (zmq_send(sock, frames[i].data(), frames[i].size(), flags) < 0) return false;
  }
  return true;
}

}  // namespace

// Publish() and PublishRaw() append to `queue` under `mu`, each item due after the configured
// delay; the thread sends items in order once due and keeps the replay ring, which therefore
// needs no lock. `busy` and `idle` let Flush() wait until the queue is empty and the last item
// sent.
struct KvEventPublisher::Impl {
  KvPublisherOptions o;
  void* ctx = nullptr;
  void* pub = nullptr;
  void* router = nullptr;
  std::string bound, replay_bound;

  struct Item {
    std::chrono::steady_clock::time_point due;
    bool raw = false;
    std::vector<std::string> frames;  // raw
    std::vector<KvEvent> events;
  };
  std::mutex mu;
  std::condition_variable idle;
  std::deque<Item> queue;
  bool busy = false;
  std::deque<std::pair<uint64_t, std::string>> ring;  // (seq, payload) for replay; thread-owned
  std::mt19937_64 rng;
  std::atomic<uint64_t> batches{0}, sent{0}, dropped{0}, replays{0};
  std::atomic<bool> stop{false};
  std::thread thread;

  // One replay request on the ROUTER socket: the buffered batches from the asked sequence on,
  // in the layout the options say (with the topic frame, as vLLM 0.26 on, or without it), then
  // the end marker.
  void Serve(void* sock) {
    // [identity, "", start seq]; anything else is ignored, as vLLM does.
    std::vector<std::string> frames;
    for (;;) {
      zmq_msg_t m;
      zmq_msg_init(&m);
      if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return;
      }
      if (frames.size() < 4) frames.emplace_back(static_cast<const char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
      const bool more = zmq_msg_more(&m);
      zmq_msg_close(&m);
      if (!more) break;
    }
    if (frames.size() != 3 || !frames[1].empty()) return;
    const std::optional<uint64_t> start = DecodeKvSequence(frames[2]);
    if (!start) return;
    replays++;
    const std::string& id = frames[0];
    for (const auto& [seq, payload] : ring) {
      if (seq < *start) continue;
      if (o.legacy_replay) SendFrames(sock, {id, "", EncodeKvSequence(seq), payload});
      else SendFrames(sock, {id, "", o.topic, EncodeKvSequence(seq), payload});
    }
    if (o.legacy_replay) SendFrames(sock, {id, "", EncodeKvSequence(kKvReplayEndSequence), ""});
    else SendFrames(sock, {id, "", "", EncodeKvSequence(kKvReplayEndSequence), ""});
  }

  // The thread: serve replay requests between sends (and while idle, polling the ROUTER for
  // up to 5 ms), send each due item, and number and buffer every batch, including the ones the
  // drop fault keeps from being sent, so a subscriber sees a gap it can replay.
  void Run() {
    std::uniform_real_distribution<double> u(0, 1);
    while (!stop.load()) {
      if (router) {
        zmq_pollitem_t item{router, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, 0) > 0) Serve(router);
      }
      Item next;
      bool have = false;
      {
        std::unique_lock<std::mutex> lock(mu);
        if (queue.empty()) {
          busy = false;
          idle.notify_all();
          lock.unlock();
          if (router) {
            zmq_pollitem_t item{router, 0, ZMQ_POLLIN, 0};
            if (zmq_poll(&item, 1, 5) > 0) Serve(router);
          } else {
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
          }
          continue;
        }
        if (queue.front().due <= std::chrono::steady_clock::now()) {
          next = std::move(queue.front());
          queue.pop_front();
          busy = true;
          have = true;
        }
      }
      if (!have) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      if (next.raw) {
        SendFrames(pub, next.frames);
        continue;
      }
      KvEventBatch batch;
      batch.ts = UnixSeconds();
      batch.events = std::move(next.events);
      batch.data_parallel_rank = o.data_parallel_rank;
      std::string payload = EncodeKvEventBatch(batch, o.encoding);
      const uint64_t seq = batches++;
      if (o.drop_rate > 0 && u(rng) < o.drop_rate) {
        dropped++;
      } else if (SendFrames(pub, {o.topic, EncodeKvSequence(seq), payload})) {
        sent++;
      } else {
        dropped++;  // the PUB's high-water mark: ZeroMQ drops, as it would for a slow subscriber
      }
      if (o.buffer_steps > 0) {
        ring.emplace_back(seq, std::move(payload));
        while (ring.size() > o.buffer_steps) ring.pop_front();
      }
    }
  }
};

KvEventPublisher::KvEventPublisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

KvEventPublisher::~KvEventPublisher() {
  Stop();
  if (impl_->pub) zmq_close(impl_->pub);
  if (impl_->router) zmq_close(impl_->router);
  if (impl_->ctx) zmq_ctx_term(impl_->ctx);
}

// Validates the options, opens and binds (or connects) the sockets on this thread so a bind error
// is returned here, then starts the thread that owns them from then on.
absl::StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Start(const KvPublisherOptions& options) {
  if (options.endpoint.empty()) return absl::InvalidArgumentError("kv events publisher: an endpoint is required");
  if (!(options.drop_rate >= 0 && options.drop_rate <= 1))
    return absl::InvalidArgumentError("kv events publisher: drop_rate must be in [0, 1]");
  if (options.delay.count() < 0) return absl::InvalidArgumentError("kv events publisher: delay must be >= 0");
  auto impl = std::make_unique<Impl>();
  impl->o = options;
  impl->rng.seed(options.seed * 0x9E3779B97F4A7C15ull + 7);
  impl->ctx = zmq_ctx_new();
  auto fail = [&](const std::string& what, const std::string& addr) {
    const std::string msg = absl::StrCat("kv events publisher: cannot bind ", what, " ", addr, ": ", zmq_strerror(zmq_errno()));
    if (impl->pub) zmq_close(impl->pub);
    if (impl->router) zmq_close(impl->router);
    zmq_ctx_term(impl->ctx);
    impl->pub = impl->router = impl->ctx = nullptr;
    return absl::UnavailableError(msg);
  };
  impl->pub = zmq_socket(impl->ctx, ZMQ_PUB);
  SetInt(impl->pub, ZMQ_LINGER, 0);
  SetInt(impl->pub, ZMQ_SNDHWM, 100000);
  if (options.connect) {
    if (zmq_connect(impl->pub, options.endpoint.c_str()) != 0) return fail("PUB (connect)", options.endpoint);
    impl->bound = options.endpoint;
  } else {
    if (zmq_bind(impl->pub, BindAddress(options.endpoint).c_str()) != 0) return fail("PUB", options.endpoint);
    impl->bound = LastEndpoint(impl->pub);
  }
  if (!options.replay_endpoint.empty()) {
    impl->router = zmq_socket(impl->ctx, ZMQ_ROUTER);
    SetInt(impl->router, ZMQ_LINGER, 0);
    SetInt(impl->router, ZMQ_SNDHWM, 0);  // a replay of the whole buffer must not be cut
    if (zmq_bind(impl->router, BindAddress(options.replay_endpoint).c_str()) != 0)
      return fail("ROUTER", options.replay_endpoint);
    impl->replay_bound = LastEndpoint(impl->router);
  }
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Run(); });
  return std::unique_ptr<KvEventPublisher>(new KvEventPublisher(std::move(impl)));
}

std::string KvEventPublisher::endpoint() const { return impl_->bound; }
std::string KvEventPublisher::replay_endpoint() const { return impl_->replay_bound; }

void KvEventPublisher::Publish(std::vector<KvEvent> events) {
  Impl::Item item;
  item.due = std::chrono::steady_clock::now() + impl_->o.delay;
  item.events = std::move(events);
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->queue.push_back(std::move(item));
}

void KvEventPublisher::PublishRaw(std::vector<std::string> frames) {
  Impl::Item item;
  item.due = std::chrono::steady_clock::now() + impl_->o.delay;
  item.raw = true;
  item.frames = std::move(frames);
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->queue.push_back(std::move(item));
}

bool KvEventPublisher::Flush(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  return impl_->idle.wait_for(lock, timeout, [&] { return impl_->queue.empty() && !impl_->busy; });
}

KvPublisherStats KvEventPublisher::stats() const {
  return KvPublisherStats{impl_->batches.load(), impl_->sent.load(), impl_->dropped.load(), impl_->replays.load()};
}

void KvEventPublisher::Stop() {
  impl_->stop = true;
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace epp
