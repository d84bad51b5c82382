// libcurl multi-interface client: the only user of libcurl in the project.
#include <curl/curl.h>

#include <chrono>
#include <memory>
#include <mutex>

#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"
#include "epp/http.h"

namespace epp {
namespace {

void GlobalInitOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Transfer {
  const HttpRequest* req = nullptr;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  HttpResponse resp;
  bool too_big = false;
  char errbuf[CURL_ERROR_SIZE] = {0};
  std::chrono::steady_clock::time_point start;
};

size_t OnBody(char* data, size_t size, size_t nmemb, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * nmemb;
  if (t->resp.body.size() + n > t->req->max_body_bytes) {
    t->too_big = true;
    return 0;  // aborts the transfer with CURLE_WRITE_ERROR
  }
  t->resp.body.append(data, n);
  return n;
}

std::string Mib(size_t bytes) {
  if (bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

constexpr absl::string_view kRefusedPayload = "type.epp.dev/connection-refused";

absl::Status TransferError(const Transfer& t, CURLcode code) {
  const std::string what = t.req->method + " " + t.req->url + ": ";
  if (t.too_big || code == CURLE_FILESIZE_EXCEEDED) {
    return absl::ResourceExhaustedError(what + "response body exceeds the cap of " + Mib(t.req->max_body_bytes));
  }
  std::string detail = t.errbuf[0] ? t.errbuf : curl_easy_strerror(code);
  switch (code) {
    case CURLE_OPERATION_TIMEDOUT:
      return absl::DeadlineExceededError(what + "timed out after " + std::to_string(t.req->timeout.count()) + " ms");
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

}  // namespace

namespace {

std::vector<absl::StatusOr<HttpResponse>> RunTransfers(CURLM* multi, std::span<const HttpRequest> requests) {
  std::vector<absl::StatusOr<HttpResponse>> results(requests.size(), absl::UnknownError("not run"));
  if (requests.empty()) return results;
  std::vector<std::unique_ptr<Transfer>> transfers;
  for (const HttpRequest& req : requests) {
    auto t = std::make_unique<Transfer>();
    t->req = &req;
    CURL* e = curl_easy_init();
    t->easy = e;
    curl_easy_setopt(e, CURLOPT_URL, req.url.c_str());
    curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &OnBody);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(req.timeout.count()));
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(req.timeout.count()));
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(req.max_body_bytes));
    if (req.accept_gzip) curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "gzip");
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    if (!req.ca_file.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, req.ca_file.c_str());
    if (req.insecure) {
      curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
      curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    for (const std::string& h : req.headers) t->headers = curl_slist_append(t->headers, h.c_str());
    if (req.method == "POST") {
      curl_easy_setopt(e, CURLOPT_POST, 1L);
      curl_easy_setopt(e, CURLOPT_POSTFIELDS, req.body.data());
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
      t->headers = curl_slist_append(t->headers, "Expect:");  // no 100-continue round trip
    }
    if (t->headers) curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
    t->start = std::chrono::steady_clock::now();
    curl_multi_add_handle(multi, e);
    transfers.push_back(std::move(t));
  }
  int running = 0;
  do {
    curl_multi_perform(multi, &running);
    int msgs = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi, &msgs)) {
      if (msg->msg != CURLMSG_DONE) continue;
      Transfer* t = nullptr;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&t));
      const size_t idx = static_cast<size_t>(t->req - requests.data());
      t->resp.elapsed_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t->start).count();
      if (msg->data.result != CURLE_OK) {
        results[idx] = TransferError(*t, msg->data.result);
      } else {
        curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &t->resp.status);
        char* ct = nullptr;
        curl_easy_getinfo(t->easy, CURLINFO_CONTENT_TYPE, &ct);
        if (ct) t->resp.content_type = ct;
        results[idx] = std::move(t->resp);
      }
    }
    if (running > 0) curl_multi_poll(multi, nullptr, 0, 100, nullptr);
  } while (running > 0);
  for (auto& t : transfers) {
    curl_multi_remove_handle(multi, t->easy);
    curl_easy_cleanup(t->easy);
    curl_slist_free_all(t->headers);
  }
  return results;
}

}  // namespace

HttpClient::HttpClient() {
  GlobalInitOnce();
  multi_ = curl_multi_init();
}

HttpClient::~HttpClient() { curl_multi_cleanup(static_cast<CURLM*>(multi_)); }

std::vector<absl::StatusOr<HttpResponse>> HttpClient::FetchAll(std::span<const HttpRequest> requests) {
  return RunTransfers(static_cast<CURLM*>(multi_), requests);
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

}  // namespace epp
