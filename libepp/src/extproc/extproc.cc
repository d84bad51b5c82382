// ExtProcServer (gRPC callback API: one reactor per stream, no thread per stream) and
// HealthServer (gRPC's default health service on its own port).
//
// Stream time limits (ExtProcOptions::request_timeout, idle_timeout): every open reactor is in a
// registry, and one watchdog thread looks at them a few times per limit and ends those past one
// with DEADLINE_EXCEEDED. A reactor is reference-counted (gRPC's reference, dropped in OnDone, and
// the watchdog's while it ends one outside the registry lock), so neither deletes it under the
// other.
#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/ext/health_check_service_server_builder_option.h>
#include <grpcpp/health_check_service_interface.h>
#include <google/protobuf/util/json_util.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/os_error.h"
#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"
#include "extproc/session_impl.h"
#include "extproc/tls_credentials.h"

namespace epp {
namespace {

namespace pb = extproc_pb;

// One JSON line per message in and out, for `eppctl explain --ext-proc`. The file is created
// 0600 (it holds prompts); credential headers are redacted; every file of the server draws on one
// byte budget (`budget`), past which the file says so and stops.
class CaptureFile {
 public:
  CaptureFile(const std::string& dir, int64_t id, std::atomic<int64_t>* written, int64_t budget,
              std::atomic<int64_t>* truncated)
      : written_(written), budget_(budget), truncated_(truncated) {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    path_ = absl::StrCat(dir, "/stream-", std::chrono::duration_cast<std::chrono::milliseconds>(now).count(), "-", id, ".jsonl");
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  }
  ~CaptureFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  void Write(const char* direction, const google::protobuf::Message& m) {
    if (fd_ < 0 || cut_) return;
    std::string json;
    google::protobuf::util::JsonPrintOptions o;
    o.preserve_proto_field_names = true;
    const google::protobuf::Message* shown = &m;
    std::unique_ptr<google::protobuf::Message> copy;
    if (HasCredentials(m)) {
      copy.reset(m.New());
      copy->CopyFrom(m);
      Redact(*copy);
      shown = copy.get();
    }
    if (!google::protobuf::util::MessageToJsonString(*shown, &json, o).ok()) return;
    std::string line = absl::StrCat("{\"direction\":\"", direction, "\",\"message\":", json, "}\n");
    const int64_t size = static_cast<int64_t>(line.size());
    if (written_->fetch_add(size) + size > budget_) {
      written_->fetch_sub(size);
      cut_ = true;
      (*truncated_)++;
      line = absl::StrCat("{\"truncated\":\"the capture budget of ", budget_, " bytes is spent\"}\n");
    }
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_, p, left);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        ::close(fd_);
        fd_ = -1;
        return;
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
  }

 private:
  static bool Sensitive(std::string_view key) {
    static constexpr std::string_view kNames[] = {"authorization", "proxy-authorization", "cookie", "set-cookie",
                                                  "x-api-key"};
    for (std::string_view n : kNames)
      if (absl::EqualsIgnoreCase(absl::string_view(key.data(), key.size()), absl::string_view(n.data(), n.size())))
        return true;
    return false;
  }
  static const ::envoy::config::core::v3::HeaderMap* Headers(const google::protobuf::Message& m) {
    if (const auto* r = dynamic_cast<const pb::ProcessingRequest*>(&m)) {
      if (r->has_request_headers()) return &r->request_headers().headers();
      if (r->has_response_headers()) return &r->response_headers().headers();
    }
    return nullptr;
  }
  static bool HasCredentials(const google::protobuf::Message& m) {
    const ::envoy::config::core::v3::HeaderMap* h = Headers(m);
    if (h == nullptr) return false;
    for (const auto& v : h->headers())
      if (Sensitive(v.key())) return true;
    return false;
  }
  static void Redact(google::protobuf::Message& m) {
    auto* r = dynamic_cast<pb::ProcessingRequest*>(&m);
    if (r == nullptr) return;
    ::envoy::config::core::v3::HeaderMap* h = r->has_request_headers() ? r->mutable_request_headers()->mutable_headers()
                                            : r->has_response_headers() ? r->mutable_response_headers()->mutable_headers()
                                                                        : nullptr;
    if (h == nullptr) return;
    for (auto& v : *h->mutable_headers())
      if (Sensitive(v.key())) {
        if (!v.value().empty()) v.set_value("<redacted>");
        if (!v.raw_value().empty()) v.set_raw_value("<redacted>");
      }
  }
  std::string path_;
  int fd_ = -1;
  bool cut_ = false;
  std::atomic<int64_t>* written_;
  int64_t budget_;
  std::atomic<int64_t>* truncated_;
};

}  // namespace

int64_t SteadyMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct ExtProcServer::Impl final : public pb::ExternalProcessor::CallbackService {
  std::unique_ptr<SchedulerHandle> owned_handle;  // Start(const Scheduler&): a fixed scheduler
  const SchedulerHandle* scheduler = nullptr;
  const EndpointSource* source = nullptr;
  ExtProcServerOptions options;
  ExtProcStats stats;
  std::unique_ptr<internal::ReloadableTls> tls;  // with options.tls; outlives `server`, which uses it
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::atomic<int64_t> next_id{0};
  std::atomic<bool> draining{false};  // BeginDrain: new streams are refused
  bool health_checking = false;       // this port answers grpc.health.v1 (SetServing)

  class Reactor;
  std::mutex registry_mu;
  std::unordered_set<Reactor*> registry;  // open streams, for the watchdog
  std::thread watchdog;
  std::mutex watchdog_mu;
  std::condition_variable watchdog_cv;
  bool watchdog_stop = false;

  class Reactor final : public grpc::ServerBidiReactor<pb::ProcessingRequest, pb::ProcessingResponse> {
   public:
    Reactor(Impl* s, grpc::CallbackServerContext* ctx)
        : s_(s), ctx_(ctx), scheduler_(s->scheduler->Get()), session_(*scheduler_, *s->source, s->options.session, &s->stats) {
      s_->stats.streams_total++;
      // Past max_streams the stream is answered 429 at its first message (not a gRPC error: the
      // gateway's client sees the reference's overload status, not a failed ext_proc call).
      refuse_ = s_->stats.streams_active.fetch_add(1) + 1 > s_->options.max_streams && s_->options.max_streams > 0;
      // Once the budget is spent (a file was cut short), no stream is captured any more.
      if (!s_->options.capture_dir.empty() && s_->stats.capture_truncated.load() == 0)
        capture_ = std::make_unique<CaptureFile>(s_->options.capture_dir, s_->next_id++, &s_->stats.capture_bytes,
                                                 static_cast<int64_t>(s_->options.capture_max_bytes),
                                                 &s_->stats.capture_truncated);
      started_us_ = last_message_us_ = SteadyMicros();
      if (s_->options.session.flow_control) {
        if (std::shared_ptr<flowcontrol::FlowController> f = s_->options.session.flow_control->Get()) {
          session_.flow = std::move(f);
          // The layer's callback keeps the reactor alive (a reference) until it has run.
          session_.flow_hold = [this] { Ref(); };
          session_.flow_done = [this](const flowcontrol::Completion& c) { OnFlowDone(c); };
          // In-flight eviction: the layer may call this after the stream ended, so it goes through
          // a token that OnDone clears (holding a reference while it runs).
          evict_token_ = std::make_shared<EvictToken>();
          evict_token_->reactor = this;
          session_.flow_evict = [token = evict_token_](const flowcontrol::DropAnswer& a) {
            Reactor* r = nullptr;
            {
              std::lock_guard<std::mutex> lock(token->mu);
              r = token->reactor;
              if (r == nullptr) return;
              r->Ref();
            }
            r->OnEvict(a);
            r->Unref();
          };
        }
      }
      {
        std::lock_guard<std::mutex> lock(s_->registry_mu);
        s_->registry.insert(this);
      }
      StartRead(&in_);
    }
    void OnReadDone(bool ok) override {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      if (!ok) {  // the client half-closed (or the call died)
        read_closed_ = true;
        MaybeFinish();
        return;
      }
      if (finished_) return;  // ended by the watchdog while this read was on its way
      last_message_us_.store(SteadyMicros(), std::memory_order_relaxed);
      if (capture_) capture_->Write("request", in_);
      std::vector<pb::ProcessingResponse> out;
      absl::Status st;
      if (refuse_) {
        session_.RefuseStream(out);
      } else {
        st = session_.Process(in_, out);
      }
      if (session_.body_done || session_.finished) request_done_.store(true, std::memory_order_relaxed);
      for (auto& r : out) {
        if (capture_) capture_->Write("response", r);
        queue_.push_back(std::move(r));
      }
      if (!st.ok()) {
        status_ = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(st.message()));
        read_closed_ = true;
      } else if (session_.finished) {
        read_closed_ = true;  // an ImmediateResponse ends the exchange
      } else {
        StartRead(&in_);
      }
      MaybeWrite();
      MaybeFinish();
    }
    void OnWriteDone(bool ok) override {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      writing_ = false;
      if (!queue_.empty()) queue_.pop_front();
      if (!ok) {
        queue_.clear();
        read_closed_ = true;
      }
      MaybeWrite();
      MaybeFinish();
    }
    void OnCancel() override {
      {
        std::lock_guard<std::recursive_mutex> lock(mu_);
        cancelled_ = true;
      }
      CancelFlow();  // the client went away: it leaves the flow-control queue at once
    }
    // The layer's outcome for this stream's request (any thread; before Enqueue returns for an
    // immediate answer, inside CancelFlow for a cancel). Drops the reference flow_hold took.
    void OnFlowDone(const flowcontrol::Completion& c) {
      {
        std::lock_guard<std::recursive_mutex> lock(mu_);
        const bool alive = !finished_ && !cancelled_;
        std::vector<pb::ProcessingResponse> out;
        session_.Resume(c, alive, out);
        if (alive) {
          for (auto& r : out) {
            if (capture_) capture_->Write("response", r);
            queue_.push_back(std::move(r));
          }
          if (session_.finished) read_closed_ = true;
        } else {
          read_closed_ = true;
        }
        MaybeWrite();
        MaybeFinish();
      }
      Unref();
    }
    // The layer evicted this stream's request to make room for higher-priority work: the answer
    // (429, x-llm-d-request-dropped-reason: evicted) ends the exchange, unless it already ended.
    void OnEvict(const flowcontrol::DropAnswer& a) {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      if (finished_ || cancelled_) return;
      std::vector<pb::ProcessingResponse> out;
      session_.Evict(a, out);
      if (out.empty()) return;
      for (auto& r : out) {
        if (capture_) capture_->Write("response", r);
        queue_.push_back(std::move(r));
      }
      read_closed_ = true;
      MaybeWrite();
      MaybeFinish();
    }
    // Takes the request out of the flow-control queue if it still waits there.
    void CancelFlow() {
      std::shared_ptr<flowcontrol::FlowController> flow;
      flowcontrol::Handle handle = flowcontrol::kNoHandle;
      {
        std::lock_guard<std::recursive_mutex> lock(mu_);
        if (!session_.flow_waiting || session_.flow_handle == flowcontrol::kNoHandle) return;
        flow = session_.flow;
        handle = session_.flow_handle;
      }
      flow->Cancel(handle);  // false: the outcome is on its way (OnFlowDone sees the stream ended)
    }
    void OnDone() override {
      if (evict_token_) {
        std::lock_guard<std::mutex> lock(evict_token_->mu);
        evict_token_->reactor = nullptr;  // a later eviction finds no stream
      }
      {
        std::lock_guard<std::mutex> lock(s_->registry_mu);
        s_->registry.erase(this);
      }
      s_->stats.streams_active--;
      Unref();
    }

    // Which limit the stream is past at `now_us`, if any (called under the registry lock).
    enum class Expiry { kNone, kRequest, kIdle };
    Expiry ExpiredAt(int64_t now_us, int64_t request_us, int64_t idle_us) const {
      if (!request_done_.load(std::memory_order_relaxed))
        return request_us > 0 && now_us - started_us_ >= request_us ? Expiry::kRequest : Expiry::kNone;
      return idle_us > 0 && now_us - last_message_us_.load(std::memory_order_relaxed) >= idle_us ? Expiry::kIdle
                                                                                                   : Expiry::kNone;
    }
    // Ends the stream with DEADLINE_EXCEEDED (the watchdog, holding a reference). What is queued
    // is dropped: a stream past its limit gets no more answers. A write already under way is
    // cut by cancelling the call, since Finish must wait for it.
    void Expire(Expiry why, const std::string& message) {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      if (finished_) return;
      (why == Expiry::kRequest ? s_->stats.timeouts_request : s_->stats.timeouts_idle)++;
      status_ = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, message);
      cancelled_ = true;
      CancelFlow();  // a request still queued leaves the layer
      read_closed_ = true;
      if (writing_) {
        while (queue_.size() > 1) queue_.pop_back();
        ctx_->TryCancel();  // the client reads nothing: OnWriteDone(false) follows, then Finish
      } else {
        queue_.clear();
      }
      MaybeFinish();
    }
    void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
    void Unref() {
      if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
    }

   private:
    void MaybeWrite() {
      if (writing_ || queue_.empty()) return;
      writing_ = true;
      StartWrite(&queue_.front());
    }
    void MaybeFinish() {
      // A request waiting in flow control keeps the stream open until the layer answers.
      if (finished_ || !read_closed_ || writing_ || !queue_.empty() || session_.flow_waiting) return;
      finished_ = true;
      Finish(status_);
    }

    struct EvictToken {
      std::mutex mu;
      Reactor* reactor = nullptr;
    };
    std::shared_ptr<EvictToken> evict_token_;
    Impl* s_;
    grpc::CallbackServerContext* ctx_;
    std::shared_ptr<const Scheduler> scheduler_;  // the stream's, for its whole life (before session_)
    ExtProcSession::Impl session_;
    std::unique_ptr<CaptureFile> capture_;
    std::recursive_mutex mu_;  // reactions may run inline from Start* calls
    pb::ProcessingRequest in_;
    std::deque<pb::ProcessingResponse> queue_;  // front = being written; deque keeps it in place
    bool writing_ = false, read_closed_ = false, finished_ = false;
    bool cancelled_ = false;  // the call was cancelled or timed out: a late pick is not made
    bool refuse_ = false;     // opened past max_streams: its first message is answered 429
    grpc::Status status_ = grpc::Status::OK;
    std::atomic<int> refs_{1};  // gRPC's, until OnDone
    int64_t started_us_ = 0;
    std::atomic<int64_t> last_message_us_{0};
    std::atomic<bool> request_done_{false};
  };

  // A stream that arrives once the drain began: UNAVAILABLE at once, so the gateway retries on
  // another replica (gRPC's own Shutdown refuses them too, but only from the moment it is called,
  // after readiness has already turned NOT_SERVING).
  class Refused final : public grpc::ServerBidiReactor<pb::ProcessingRequest, pb::ProcessingResponse> {
   public:
    Refused() { Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the endpoint picker is shutting down (draining)")); }
    void OnDone() override { delete this; }
  };

  grpc::ServerBidiReactor<pb::ProcessingRequest, pb::ProcessingResponse>* Process(grpc::CallbackServerContext* ctx) override {
    if (draining.load()) return new Refused();
    return new Reactor(this, ctx);
  }

  // The watchdog: a few looks per limit (at most every second, at least every 5 ms).
  void StartWatchdog() {
    const int64_t request_us = options.session.request_timeout.count() * 1000;
    const int64_t idle_us = options.session.idle_timeout.count() * 1000;
    const int64_t shortest = std::min(request_us > 0 ? request_us : INT64_MAX, idle_us > 0 ? idle_us : INT64_MAX);
    const uint64_t trim_after = options.trim_after_bytes;
    if (shortest == INT64_MAX && trim_after == 0) return;
    const auto period = std::chrono::microseconds(std::clamp<int64_t>(shortest / 4, 5000, 1000000));
    watchdog = std::thread([this, request_us, idle_us, period, trim_after] {
      std::unique_lock<std::mutex> wait_lock(watchdog_mu);
      int64_t trimmed_at_bytes = 0, seen_bytes = 0;
      while (!watchdog_cv.wait_for(wait_lock, period, [this] { return watchdog_stop; })) {
        std::vector<std::pair<Reactor*, Reactor::Expiry>> due;
        const int64_t now = SteadyMicros();
        // After a burst of large bodies (trim_after bytes received or freed since the last time,
        // none since the last look), free pages go back to the system. Not while bodies keep coming: the
        // allocator reuses what it freed then, which serve's allocator settings are for.
        const int64_t received = stats.request_body_bytes.load(std::memory_order_relaxed) +
                                 static_cast<int64_t>(options.session.buffer_budget->given_total());
        if (trim_after > 0 && received == seen_bytes && static_cast<uint64_t>(received - trimmed_at_bytes) >= trim_after) {
          ::malloc_trim(0);
          trimmed_at_bytes = received;
          stats.memory_trims++;
          stats.memory_trim_us += SteadyMicros() - now;
        }
        seen_bytes = received;
        {
          std::lock_guard<std::mutex> lock(registry_mu);
          for (Reactor* r : registry) {
            const Reactor::Expiry e = r->ExpiredAt(now, request_us, idle_us);
            if (e == Reactor::Expiry::kNone) continue;
            r->Ref();
            due.emplace_back(r, e);
          }
        }
        for (auto& [r, e] : due) {
          r->Expire(e, e == Reactor::Expiry::kRequest
                           ? absl::StrCat("request not complete within the request timeout (",
                                          options.session.request_timeout.count(), " ms)")
                           : absl::StrCat("no message from the gateway within the idle timeout (",
                                          options.session.idle_timeout.count(), " ms)"));
          r->Unref();
        }
      }
    });
  }
  void StopWatchdog() {
    {
      std::lock_guard<std::mutex> lock(watchdog_mu);
      watchdog_stop = true;
    }
    watchdog_cv.notify_all();
    if (watchdog.joinable()) watchdog.join();
  }
};

ExtProcServer::ExtProcServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ExtProcServer::~ExtProcServer() { Shutdown(std::chrono::milliseconds(0)); }

absl::StatusOr<std::unique_ptr<ExtProcServer>> ExtProcServer::Start(const Scheduler& scheduler, const EndpointSource& endpoints,
                                                                    const ExtProcServerOptions& options) {
  // Not owned: the caller keeps the scheduler alive for the server's life.
  auto handle = std::make_unique<SchedulerHandle>(std::shared_ptr<const Scheduler>(&scheduler, [](const Scheduler*) {}));
  const SchedulerHandle& ref = *handle;
  return StartWith(ref, endpoints, options, std::move(handle));
}

absl::StatusOr<std::unique_ptr<ExtProcServer>> ExtProcServer::Start(const SchedulerHandle& scheduler,
                                                                    const EndpointSource& endpoints,
                                                                    const ExtProcServerOptions& options) {
  return StartWith(scheduler, endpoints, options, nullptr);
}

absl::StatusOr<std::unique_ptr<ExtProcServer>> ExtProcServer::StartWith(const SchedulerHandle& scheduler,
                                                                        const EndpointSource& endpoints,
                                                                        const ExtProcServerOptions& options,
                                                                        std::unique_ptr<SchedulerHandle> owned) {
  if (options.session.request_timeout.count() < 0 || options.session.idle_timeout.count() < 0)
    return absl::InvalidArgumentError("ext_proc stream timeouts must be >= 0 (0 disables one)");
  if (options.session.handshake_timeout.count() <= 0 || options.session.handshake_timeout.count() > INT32_MAX)
    return absl::InvalidArgumentError("ext_proc handshake timeout must be > 0");
  auto impl = std::make_unique<Impl>();
  impl->owned_handle = std::move(owned);
  impl->scheduler = &scheduler;
  impl->source = &endpoints;
  impl->options = options;
  if (options.max_streams < 0) return absl::InvalidArgumentError("ext_proc max_streams must be >= 0 (0: no limit)");
  if (!impl->options.session.buffer_budget)
    impl->options.session.buffer_budget = std::make_shared<BufferBudget>(options.max_buffered_bytes);
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (options.tls) {
    if (options.cert_pem.empty() || options.key_pem.empty())
      return absl::InvalidArgumentError("TLS serving needs a certificate and a key");
    auto tls = internal::ReloadableTls::Create({options.cert_pem, options.key_pem, options.client_ca_pem});
    if (!tls.ok()) return absl::InvalidArgumentError(absl::StrCat("ext_proc TLS: ", tls.status().message()));
    impl->tls = *std::move(tls);
    creds = impl->tls->Credentials();
  } else {
    if (!options.client_ca_pem.empty())
      return absl::InvalidArgumentError("ext_proc: a client CA needs TLS (client certificates are checked in its handshake)");
    creds = grpc::InsecureServerCredentials();
  }
  // Reject ports gRPC would silently wrap modulo 65536.
  const size_t colon = options.listen.rfind(':');
  int64_t port = -1;
  if (colon != std::string::npos && colon + 1 < options.listen.size() && options.listen.size() - colon - 1 <= 5) {
    port = 0;
    for (char c : options.listen.substr(colon + 1)) port = (c >= '0' && c <= '9' && port >= 0) ? port * 10 + (c - '0') : -1;
  }
  if (port < 0 || port > 65535)
    return absl::InvalidArgumentError(absl::StrCat("ext_proc listen address '", options.listen, "': expected host:port with port 0..65535"));
  grpc::ServerBuilder builder;
  // No SO_REUSEPORT: a second server on a taken port must fail, not silently share it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, static_cast<int>(options.session.handshake_timeout.count()));
  if (options.max_streams_per_connection > 0)
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                               static_cast<int>(std::min<uint32_t>(options.max_streams_per_connection, INT32_MAX)));
  builder.AddListeningPort(options.listen, creds, &impl->port);
  builder.RegisterService(impl.get());
  if (options.health_checking) {
    // GIE's --health-checking: gRPC's default health service on this port too; its states are
    // set below and by SetServing().
    grpc::EnableDefaultHealthCheckService(true);
  } else {
    // Health checks are answered on the health port only (HealthServer); without this, gRPC's
    // process-wide default health service would also answer here, with the wrong states.
    builder.SetOption(std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(nullptr));
  }
  // A body chunk may be as large as the whole body.
  const size_t max_msg = std::max<size_t>(size_t{4} << 20, options.session.max_request_bytes + (size_t{1} << 20));
  const size_t max_recv = options.max_receive_message_bytes ? options.max_receive_message_bytes : max_msg;
  const size_t max_send = options.max_send_message_bytes ? options.max_send_message_bytes : max_msg;
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<size_t>(max_recv, INT32_MAX)));
  builder.SetMaxSendMessageSize(static_cast<int>(std::min<size_t>(max_send, INT32_MAX)));
  impl->server = builder.BuildAndStart();
  if (!impl->server || impl->port == 0)
    return absl::UnavailableError(absl::StrCat("cannot listen for ext_proc on ", options.listen,
                                               internal::BindFailureSuffix(options.listen.substr(0, colon), static_cast<int>(port))));
  impl->health_checking = options.health_checking;
  impl->StartWatchdog();
  return std::unique_ptr<ExtProcServer>(new ExtProcServer(std::move(impl)));
}

namespace {

// The services GIE's health server answers: `liveness` whenever the process runs; readiness (and
// the ext_proc service, "" and GIE's chart's `inference-extension`) as the host decides.
void SetHealthStatuses(grpc::HealthCheckServiceInterface* hc, bool ready) {
  if (!hc) return;
  hc->SetServingStatus("liveness", true);
  for (const char* s : {"", "readiness", "inference-extension"}) hc->SetServingStatus(s, ready);
  hc->SetServingStatus(std::string(kExtProcServiceName), ready);
}

}  // namespace

int ExtProcServer::port() const { return impl_->port; }
const BufferBudget& ExtProcServer::buffer_budget() const { return *impl_->options.session.buffer_budget; }

void ExtProcServer::SetServing(bool serving) {
  if (!impl_ || !impl_->server || !impl_->health_checking) return;
  SetHealthStatuses(impl_->server->GetHealthCheckService(), serving);
}
ExtProcStats& ExtProcServer::stats() { return impl_->stats; }

absl::Status ExtProcServer::UpdateTls(const std::string& cert_pem, const std::string& key_pem,
                                      const std::string& client_ca_pem) {
  if (!impl_ || !impl_->tls) return absl::FailedPreconditionError("the ext_proc server does not serve TLS");
  return impl_->tls->Update({cert_pem, key_pem, client_ca_pem});
}

void ExtProcServer::BeginDrain() {
  if (impl_) impl_->draining.store(true);
}

void ExtProcServer::Shutdown(std::chrono::milliseconds drain) {
  if (!impl_ || !impl_->server) return;
  impl_->draining.store(true);
  // The watchdog goes on during the drain (a stream past its limit still ends); the server then
  // cancels what is left, and no stream remains for it to look at.
  impl_->server->Shutdown(std::chrono::system_clock::now() + drain);
  impl_->server->Wait();
  impl_->StopWatchdog();
  impl_->server.reset();
}

struct HealthServer::Impl {
  // The default health service is only added inside Server::Start, after ServerBuilder has
  // refused a server with no service of its own ("At least one of the completion queues must be
  // frequently polled"). An empty callback generic service (UNIMPLEMENTED for any other method)
  // gives the builder one.
  grpc::CallbackGenericService unimplemented;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

HealthServer::HealthServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HealthServer::~HealthServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<HealthServer>> HealthServer::Start(const std::string& listen) {
  grpc::EnableDefaultHealthCheckService(true);
  auto impl = std::make_unique<Impl>();
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &impl->port);
  builder.RegisterCallbackGenericService(&impl->unimplemented);
  impl->server = builder.BuildAndStart();
  if (!impl->server || impl->port == 0) {
    const size_t colon = listen.rfind(':');
    int port = 0;
    if (colon != std::string::npos) port = std::atoi(listen.c_str() + colon + 1);
    return absl::UnavailableError(absl::StrCat("cannot listen for health checks on ", listen,
                                               internal::BindFailureSuffix(listen.substr(0, colon == std::string::npos ? 0 : colon), port)));
  }
  auto h = std::unique_ptr<HealthServer>(new HealthServer(std::move(impl)));
  h->SetReady(false);
  return h;
}

int HealthServer::port() const { return impl_->port; }

void HealthServer::SetReady(bool ready) {
  if (!impl_->server) return;
  SetHealthStatuses(impl_->server->GetHealthCheckService(), ready);
}

void HealthServer::Shutdown() {
  if (!impl_ || !impl_->server) return;
  if (auto* hc = impl_->server->GetHealthCheckService()) hc->Shutdown();
  impl_->server->Shutdown(std::chrono::system_clock::now());
  impl_->server->Wait();
  impl_->server.reset();
}

}  // namespace epp
