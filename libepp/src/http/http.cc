// libcurl multi-interface client: the only user of libcurl in the project.
#include <curl/curl.h>
#include <strings.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"
#include "epp/runtime/http.h"
#include "http/gzip_stream.h"

namespace epp {
namespace {

void GlobalInitOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// gzip decoders kept from one transfer to the next (GzipStream), at most kMaxIdle of them.
class InflatePool {
 public:
  std::unique_ptr<internal::GzipStream> Get() {
    while (!idle_.empty()) {
      std::unique_ptr<internal::GzipStream> z = std::move(idle_.back());
      idle_.pop_back();
      if (z->Reset()) return z;
    }
    auto z = std::make_unique<internal::GzipStream>();
    return z->ok() ? std::move(z) : nullptr;
  }
  void Put(std::unique_ptr<internal::GzipStream> z) {
    // A burst of reads keeps no more than this many (~40 KB each).
    if (z != nullptr && idle_.size() < kMaxIdle) idle_.push_back(std::move(z));
  }

 private:
  static constexpr size_t kMaxIdle = 64;
  std::vector<std::unique_ptr<internal::GzipStream>> idle_;
};

struct Transfer {
  uint64_t id = 0;
  HttpRequest req;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  HttpResponse resp;
  bool too_big = false;
  char errbuf[CURL_ERROR_SIZE] = {0};
  std::chrono::steady_clock::time_point start;
  // Content coding of the answer, from its headers: decoded here (not by libcurl, which would
  // build a decoder per transfer).
  enum class Coding { kIdentity, kGzip, kOther } coding = Coding::kIdentity;
  std::string other_coding;       // kOther: what the server named
  bool bad_gzip = false;          // the gzip stream did not decode
  bool gzip_done = false;         // the gzip stream ended (bytes after it are ignored)
  std::unique_ptr<internal::GzipStream> z;  // from `inflaters` while decoding
  InflatePool* inflaters = nullptr;
};

size_t OnHeader(char* data, size_t size, size_t nmemb, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * nmemb;
  std::string_view line(data, n);
  if (line.rfind("HTTP/", 0) == 0) {  // a new response (after a 1xx): its own headers follow
    t->coding = Transfer::Coding::kIdentity;
    return n;
  }
  constexpr std::string_view kName = "content-encoding:";
  if (line.size() > kName.size() && strncasecmp(line.data(), kName.data(), kName.size()) == 0) {
    std::string_view v = line.substr(kName.size());
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) v.remove_suffix(1);
    if (v.size() == 4 && strncasecmp(v.data(), "gzip", 4) == 0) {
      t->coding = Transfer::Coding::kGzip;
    } else if (!(v.size() == 8 && strncasecmp(v.data(), "identity", 8) == 0)) {
      t->coding = Transfer::Coding::kOther;
      t->other_coding = std::string(v.substr(0, 64));
    }
  }
  return n;
}

size_t OnBody(char* data, size_t size, size_t nmemb, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * nmemb;
  if (t->coding == Transfer::Coding::kOther) return 0;  // aborts: reported from `other_coding`
  if (t->coding == Transfer::Coding::kIdentity) {
    if (t->resp.body.size() + n > t->req.max_body_bytes) {
      t->too_big = true;
      return 0;  // aborts the transfer with CURLE_WRITE_ERROR
    }
    t->resp.body.append(data, n);
    return n;
  }
  if (t->gzip_done) return n;
  if (t->z == nullptr && (t->z = t->inflaters->Get()) == nullptr) {
    t->bad_gzip = true;
    return 0;
  }
  switch (t->z->Feed(std::string_view(data, n), t->resp.body, t->req.max_body_bytes)) {
    case internal::GzipStream::Result::kMore:
      return n;
    case internal::GzipStream::Result::kDone:
      t->gzip_done = true;
      return n;
    case internal::GzipStream::Result::kTooBig:
      t->too_big = true;
      return 0;
    case internal::GzipStream::Result::kBad:
      break;
  }
  t->bad_gzip = true;
  return 0;
}

std::string Mib(size_t bytes) {
  if (bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

constexpr absl::string_view kRefusedPayload = "type.epp.dev/connection-refused";

absl::Status TransferError(const Transfer& t, CURLcode code) {
  const std::string what = t.req.method + " " + t.req.url + ": ";
  if (t.too_big || code == CURLE_FILESIZE_EXCEEDED) {
    return absl::ResourceExhaustedError(what + "response body exceeds the cap of " + Mib(t.req.max_body_bytes));
  }
  if (t.bad_gzip) return absl::UnavailableError(what + "the gzip-encoded body does not decode");
  if (t.coding == Transfer::Coding::kOther)
    return absl::UnavailableError(what + "unsupported Content-Encoding '" + t.other_coding + "'");
  std::string detail = t.errbuf[0] ? t.errbuf : curl_easy_strerror(code);
  switch (code) {
    case CURLE_OPERATION_TIMEDOUT:
      return absl::DeadlineExceededError(what + "timed out after " + std::to_string(t.req.timeout.count()) + " ms");
    case CURLE_COULDNT_CONNECT: {
      absl::Status refused = absl::UnavailableError(what + "connection refused (" + detail + ")");
      refused.SetPayload(kRefusedPayload, absl::Cord("1"));
      return refused;
    }
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
      return absl::UnavailableError(what + "connection dropped (" + detail + ")");
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
      return absl::InvalidArgumentError(what + "bad URL (" + detail + ")");
    default:
      return absl::UnavailableError(what + detail);
  }
}

// The method and its body: POST, PUT and PATCH send `body` (PUT and PATCH as a custom request
// over POST's body handling: libcurl's own PUT reads from a callback); DELETE sends none.
curl_slist* ConfigureMethod(CURL* e, const HttpRequest& req, curl_slist* headers) {
  if (req.method == "GET") return headers;
  if (req.method == "DELETE") {
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
    return headers;
  }
  curl_easy_setopt(e, CURLOPT_POST, 1L);
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, req.body.data());
  curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
  if (req.method != "POST") curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  return curl_slist_append(headers, "Expect:");  // no 100-continue round trip
}

void Configure(Transfer& t) {
  const HttpRequest& req = t.req;
  CURL* e = t.easy;
  curl_easy_setopt(e, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(e, CURLOPT_PRIVATE, &t);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &OnBody);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t.errbuf);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(req.timeout.count()));
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(req.timeout.count()));
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(req.max_body_bytes));
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, &t);
  if (req.accept_gzip) t.headers = curl_slist_append(t.headers, "Accept-Encoding: gzip");
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  if (!req.ca_file.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, req.ca_file.c_str());
  if (req.insecure) {
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  for (const std::string& h : req.headers) t.headers = curl_slist_append(t.headers, h.c_str());
  t.headers = ConfigureMethod(e, req, t.headers);
  if (t.headers) curl_easy_setopt(e, CURLOPT_HTTPHEADER, t.headers);
}

}  // namespace

struct HttpClient::Impl {
  CURLM* multi = nullptr;
  InflatePool inflaters;
  uint64_t next_id = 1;
  std::unordered_map<CURL*, std::unique_ptr<Transfer>> running;
  // Finished handles, reset, kept for the next requests: at most kMaxIdleHandles (each holds a
  // 16 KB receive buffer; a burst of 1,000 reads must not keep 1,000 of them).
  static constexpr size_t kMaxIdleHandles = 64;
  std::vector<CURL*> idle;

  void Retire(CURL* e) {
    if (idle.size() >= kMaxIdleHandles) {
      curl_easy_cleanup(e);  // its connection stays in the multi's pool
      return;
    }
    curl_easy_reset(e);  // keeps the handle's caches; its connection stays in the multi's pool
    idle.push_back(e);
  }
  std::vector<HttpClient::Finished> done;  // finished but not handed out yet
  std::atomic<bool> woken{false};         // Wakeup() was called

  // A transfer leaves the multi handle (finished, cancelled or abandoned): its handle and
  // decoder go back to the pools, its headers are freed. The caller erases it from `running`.
  void Release(CURL* e, Transfer& t) {
    curl_multi_remove_handle(multi, e);
    curl_slist_free_all(t.headers);
    t.headers = nullptr;
    inflaters.Put(std::move(t.z));
    Retire(e);
  }

  // Moves every finished transfer to `done`.
  void Harvest() {
    int msgs = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi, &msgs)) {
      if (msg->msg != CURLMSG_DONE) continue;
      CURL* e = msg->easy_handle;
      const CURLcode code = msg->data.result;
      auto it = running.find(e);
      if (it == running.end()) continue;
      Transfer& t = *it->second;
      t.resp.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t.start).count();
      if (code == CURLE_OK && t.coding == Transfer::Coding::kGzip && !t.gzip_done && t.z != nullptr) {
        t.bad_gzip = true;  // the stream ended before the gzip trailer
      }
      if (code != CURLE_OK || t.bad_gzip) {
        done.push_back({t.id, TransferError(t, code)});
      } else {
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &t.resp.status);
        char* ct = nullptr;
        curl_easy_getinfo(e, CURLINFO_CONTENT_TYPE, &ct);
        if (ct) t.resp.content_type = ct;
        done.push_back({t.id, std::move(t.resp)});
      }
      Release(e, t);
      running.erase(it);
    }
  }

  // Runs transfers until `stop()` holds, `deadline` passes or Wakeup() is called.
  template <typename Stop>
  void Drive(std::chrono::steady_clock::time_point deadline, Stop stop) {
    for (;;) {
      int still = 0;
      curl_multi_perform(multi, &still);
      Harvest();
      if (stop()) return;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return;
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
      // Waits on the transfers' sockets, at most until libcurl's own next timeout.
      curl_multi_poll(multi, nullptr, 0, static_cast<int>(std::min<int64_t>(left, INT_MAX)), nullptr);
      if (woken.exchange(false)) return;
    }
  }
};

HttpClient::HttpClient() : impl_(std::make_unique<Impl>()) {
  GlobalInitOnce();
  impl_->multi = curl_multi_init();
}

HttpClient::~HttpClient() {
  Impl& m = *impl_;
  for (auto& [e, t] : m.running) m.Release(e, *t);
  for (CURL* e : m.idle) curl_easy_cleanup(e);
  curl_multi_cleanup(m.multi);
}

uint64_t HttpClient::Start(HttpRequest request) {
  Impl& m = *impl_;
  auto t = std::make_unique<Transfer>();
  t->id = m.next_id++;
  t->req = std::move(request);
  t->inflaters = &m.inflaters;
  if (!m.idle.empty()) {
    t->easy = m.idle.back();
    m.idle.pop_back();
  } else {
    t->easy = curl_easy_init();
  }
  Configure(*t);
  t->start = std::chrono::steady_clock::now();
  curl_multi_add_handle(m.multi, t->easy);
  const uint64_t id = t->id;
  m.running.emplace(t->easy, std::move(t));
  return id;
}

std::vector<HttpClient::Finished> HttpClient::Wait(std::chrono::steady_clock::time_point deadline) {
  Impl& m = *impl_;
  if (m.done.empty()) m.Drive(deadline, [&m] { return !m.done.empty(); });
  return std::exchange(m.done, {});
}

void HttpClient::Wakeup() {
  impl_->woken = true;
  curl_multi_wakeup(impl_->multi);
}

void HttpClient::Cancel(uint64_t id) {
  Impl& m = *impl_;
  for (auto it = m.running.begin(); it != m.running.end(); ++it) {
    if (it->second->id != id) continue;
    m.Release(it->first, *it->second);
    m.running.erase(it);
    return;
  }
  std::erase_if(m.done, [id](const Finished& f) { return f.id == id; });
}

size_t HttpClient::in_flight() const { return impl_->running.size(); }

void HttpClient::set_max_idle_connections(size_t n) {
  curl_multi_setopt(impl_->multi, CURLMOPT_MAXCONNECTS, static_cast<long>(std::min<size_t>(n, LONG_MAX)));
}

std::vector<absl::StatusOr<HttpResponse>> HttpClient::FetchAll(std::span<const HttpRequest> requests) {
  Impl& m = *impl_;
  std::vector<absl::StatusOr<HttpResponse>> results(requests.size(), absl::UnknownError("not run"));
  if (requests.empty()) return results;
  std::unordered_map<uint64_t, size_t> mine;  // id -> index in requests
  for (size_t i = 0; i < requests.size(); ++i) mine.emplace(Start(requests[i]), i);
  // Requests Start()ed by the caller before this call stay in `done` for its next Wait().
  std::vector<Finished> others;
  size_t left = requests.size();
  while (left > 0) {
    m.Drive(std::chrono::steady_clock::time_point::max(), [&m] { return !m.done.empty(); });
    for (Finished& f : std::exchange(m.done, {})) {
      auto it = mine.find(f.id);
      if (it == mine.end()) {
        others.push_back(std::move(f));
        continue;
      }
      results[it->second] = std::move(f.response);
      --left;
    }
  }
  m.done = std::move(others);
  return results;
}

std::vector<absl::StatusOr<HttpResponse>> HttpFetchAll(std::span<const HttpRequest> requests) {
  HttpClient client;
  return client.FetchAll(requests);
}

absl::StatusOr<HttpResponse> HttpFetch(const HttpRequest& request) {
  return std::move(HttpFetchAll(std::span<const HttpRequest>(&request, 1)).front());
}

bool IsConnectionRefused(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable && status.GetPayload(kRefusedPayload).has_value();
}

// ---- HttpStream ------------------------------------------------------------------------------
//
// One easy handle driven by its own multi handle, so that curl_multi_poll() can be woken by
// Cancel() (curl_multi_wakeup) instead of waiting for libcurl's next progress callback, which
// comes about once a second on an idle stream: a watch is idle most of the time, and Stop() of the
// pool must not wait a second per watch.

struct HttpStream::Impl {
  CURLM* multi = nullptr;
  std::atomic<bool> cancelled{false};
};

namespace {

struct StreamTransfer {
  const std::function<bool(std::string_view)>* on_data = nullptr;
  std::string* error_body = nullptr;
  CURL* easy = nullptr;
  bool stopped = false;  // on_data asked to stop
};

size_t OnStreamBody(char* data, size_t size, size_t nmemb, void* user) {
  auto* t = static_cast<StreamTransfer*>(user);
  const size_t n = size * nmemb;
  long code = 0;
  curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
  if (code < 200 || code >= 300) {
    if (t->error_body != nullptr && t->error_body->size() < (size_t{64} << 10))
      t->error_body->append(data, std::min(n, (size_t{64} << 10) - t->error_body->size()));
    return n;
  }
  if (!(*t->on_data)(std::string_view(data, n))) {
    t->stopped = true;
    return 0;  // CURLE_WRITE_ERROR, reported as a normal end below
  }
  return n;
}

}  // namespace

HttpStream::HttpStream() : impl_(std::make_unique<Impl>()) {
  GlobalInitOnce();
  impl_->multi = curl_multi_init();
}

HttpStream::~HttpStream() {
  if (impl_->multi) curl_multi_cleanup(impl_->multi);
}

void HttpStream::Cancel() {
  impl_->cancelled = true;
  curl_multi_wakeup(impl_->multi);
}

void HttpStream::Reset() { impl_->cancelled = false; }

absl::StatusOr<long> HttpStream::Run(const HttpRequest& request, const std::function<bool(std::string_view)>& on_data,
                                     std::string* error_body) {
  const std::string what = request.method + " " + request.url;
  if (impl_->cancelled) return absl::CancelledError(what + ": cancelled");
  Transfer t;  // for the shared settings; the body goes to OnStreamBody
  t.req = request;
  t.req.accept_gzip = false;  // pieces are handed over as they come: no decoding in between
  t.easy = curl_easy_init();
  if (t.easy == nullptr) return absl::ResourceExhaustedError(what + ": curl_easy_init failed");
  Configure(t);
  StreamTransfer st{&on_data, error_body, t.easy};
  curl_easy_setopt(t.easy, CURLOPT_WRITEFUNCTION, &OnStreamBody);
  curl_easy_setopt(t.easy, CURLOPT_WRITEDATA, &st);
  curl_easy_setopt(t.easy, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(0));  // no cap: a stream
  // A connection whose peer vanished without a FIN is found by keepalive probes within about a
  // minute instead of at the request's timeout.
  curl_easy_setopt(t.easy, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(t.easy, CURLOPT_TCP_KEEPIDLE, 30L);
  curl_easy_setopt(t.easy, CURLOPT_TCP_KEEPINTVL, 10L);
  curl_multi_add_handle(impl_->multi, t.easy);
  CURLcode result = CURLE_OK;
  bool done = false;
  while (!done) {
    int running = 0;
    curl_multi_perform(impl_->multi, &running);
    int queued = 0;
    while (CURLMsg* msg = curl_multi_info_read(impl_->multi, &queued)) {
      if (msg->msg == CURLMSG_DONE) {
        result = msg->data.result;
        done = true;
      }
    }
    if (done || running == 0) break;
    if (impl_->cancelled) break;
    curl_multi_poll(impl_->multi, nullptr, 0, 1000, nullptr);
    if (impl_->cancelled) break;
  }
  long code = 0;
  curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &code);
  curl_multi_remove_handle(impl_->multi, t.easy);
  curl_easy_cleanup(t.easy);
  t.easy = nullptr;
  if (t.headers) curl_slist_free_all(t.headers);
  t.headers = nullptr;
  if (!done && impl_->cancelled) return absl::CancelledError(what + ": cancelled");
  if (result == CURLE_OK || st.stopped) return code;
  return TransferError(t, result);
}

}  // namespace epp
