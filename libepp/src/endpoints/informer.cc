// Informer (endpoints/informer.h): list-then-watch of one collection.
#include "endpoints/informer.h"

#include <algorithm>
#include <random>

#include "common/json.h"

namespace epp::internal {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxLineBytes = size_t{16} << 20;

std::string Join(const std::string& path, const std::string& query, const std::string& more) {
  std::string q = query;
  if (!more.empty()) q += (q.empty() ? "" : "&") + more;
  return q.empty() ? path : path + "?" + q;
}

const std::string* ResourceVersion(const json& object) {
  auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return nullptr;
  return JsonStringMember(*meta, "resourceVersion");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Informer>> Informer::Create(InformerOptions options, Handler handler) {
  if (!handler.on_list || !handler.on_event) return absl::InvalidArgumentError("informer: on_list and on_event are required");
  EPP_ASSIGN_OR_RETURN(std::unique_ptr<KubeClient> kube, KubeClient::Create(options.kube));
  return std::unique_ptr<Informer>(new Informer(std::move(options), std::move(handler), std::move(kube)));
}

Informer::Informer(InformerOptions options, Handler handler, std::unique_ptr<KubeClient> kube)
    : options_(std::move(options)), handler_(std::move(handler)), kube_(std::move(kube)) {
  rng_ = std::random_device{}();
}

Informer::~Informer() { Stop(); }

void Informer::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
}

void Informer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  stream_.Cancel();
  if (thread_.joinable()) thread_.join();
}

InformerStats Informer::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Informer::Failed(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.errors++;
  }
  const Logger& log = options_.log ? *options_.log : NullLogger::Get();
  if (!failing_) {
    log.Warn("watch " + options_.what + ": " + std::string(status.message()) + "; retrying with backoff, the last state stays in use");
  } else if (log.Enabled(LogLevel::kDebug)) {
    log.Debug("watch " + options_.what + ": failed again: " + std::string(status.message()));
  }
  failing_ = true;
  if (handler_.on_state) handler_.on_state(status);
}

void Informer::Recovered() {
  backoff_ = std::chrono::milliseconds(0);
  if (!failing_) return;
  failing_ = false;
  const Logger& log = options_.log ? *options_.log : NullLogger::Get();
  log.Info("watch " + options_.what + ": working again");
  if (handler_.on_state) handler_.on_state(absl::OkStatus());
}

bool Informer::Backoff() {
  // client-go's reflector: 800 ms doubling to 30 s, with jitter so replicas spread out.
  backoff_ = backoff_.count() == 0 ? options_.backoff_initial : std::min(backoff_ * 2, options_.backoff_max);
  rng_ = rng_ * 6364136223846793005ULL + 1442695040888963407ULL;
  const double jitter = 1.0 + 0.5 * static_cast<double>(rng_ >> 11) / static_cast<double>(1ULL << 53);
  const auto wait = std::chrono::milliseconds(static_cast<int64_t>(static_cast<double>(backoff_.count()) * jitter));
  std::unique_lock<std::mutex> lock(mu_);
  return !cv_.wait_for(lock, wait, [this] { return stop_; });
}

bool Informer::List(bool quorum) {
  // resourceVersion=0: served from the API server's watch cache; a relist after 410 asks for the
  // newest state instead (a quorum read), as client-go does.
  const std::string url = Join(options_.path, options_.query, quorum ? "" : "resourceVersion=0");
  absl::StatusOr<std::string> body = kube_->Get(url);
  if (!body.ok()) {
    Failed(body.status());
    return false;
  }
  const std::string source = "GET " + kube_->options().api_server + url;
  absl::StatusOr<json> doc = ParseJson(*body);
  if (!doc.ok() || !doc->is_object()) {
    Failed(absl::InvalidArgumentError(source + ": answer is not a JSON object"));
    return false;
  }
  const std::string* rv = ResourceVersion(*doc);
  auto items = doc->find("items");
  if (rv == nullptr || (items != doc->end() && !items->is_array() && !items->is_null())) {
    Failed(absl::InvalidArgumentError(source + ": not a list (metadata.resourceVersion, items[])"));
    return false;
  }
  rv_ = *rv;
  std::vector<json> objects;
  if (items != doc->end() && items->is_array()) objects = std::move(items->get_ref<json::array_t&>());
  handler_.on_list(std::move(objects));
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.lists++;
    stats_.synced = true;
  }
  Recovered();
  return true;
}

bool Informer::HandleLine(std::string_view line, WatchEnd& end) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
  if (line.empty()) return true;
  absl::StatusOr<json> event = ParseJson(line);
  const std::string* type = event.ok() && event->is_object() ? JsonStringMember(*event, "type") : nullptr;
  auto object = type ? event->find("object") : json::iterator();
  if (type == nullptr || object == event->end() || !object->is_object()) {
    Failed(absl::InvalidArgumentError("watch " + options_.what + ": an event that is not {type, object}: " +
                                      std::string(line.substr(0, 200))));
    end = WatchEnd::kFailed;
    return false;
  }
  if (*type == "ERROR") {
    // A Status object: 410 (Expired/Gone) means relist; anything else is a failure.
    const std::optional<int64_t> code = object->contains("code") ? JsonInt64((*object)["code"]) : std::nullopt;
    if (code && *code == 410) {
      end = WatchEnd::kGone;
    } else {
      const std::string* message = JsonStringMember(*object, "message");
      Failed(absl::UnavailableError("watch " + options_.what + ": ERROR event: " + (message ? *message : DumpJsonLossy(*object))));
      end = WatchEnd::kFailed;
    }
    return false;
  }
  if (const std::string* rv = ResourceVersion(*object)) rv_ = *rv;
  // The stream works: a failure reported before is over (without this, a watch that resumed after
  // an outage would be reported failing until it next ends, minutes later).
  Recovered();
  if (*type == "BOOKMARK") {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.bookmarks++;
    return true;
  }
  WatchEventType t;
  if (*type == "ADDED") t = WatchEventType::kAdded;
  else if (*type == "MODIFIED") t = WatchEventType::kModified;
  else if (*type == "DELETED") t = WatchEventType::kDeleted;
  else return true;  // a type from a newer API server: skipped
  handler_.on_event(t, *object);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.events++;
  return true;
}

Informer::WatchEnd Informer::Watch() {
  // Random in [min, 2*min), as client-go spreads its watches.
  rng_ = rng_ * 6364136223846793005ULL + 1442695040888963407ULL;
  const int64_t min_s = std::max<int64_t>(1, options_.min_watch_timeout.count());
  const int64_t timeout_s = min_s + static_cast<int64_t>((rng_ >> 33) % static_cast<uint64_t>(min_s));
  const std::string url = Join(options_.path, options_.query,
                               "watch=1&allowWatchBookmarks=true&resourceVersion=" + rv_ +
                                   "&timeoutSeconds=" + std::to_string(timeout_s));
  absl::StatusOr<HttpRequest> req = kube_->NewRequest("GET", url);
  if (!req.ok()) {
    Failed(req.status());
    return WatchEnd::kFailed;
  }
  // The server ends the stream after timeout_s; the client's own deadline is a little later.
  req->timeout = std::chrono::milliseconds((timeout_s + 30) * 1000);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.watches++;
  }
  std::string pending;  // a line not yet complete
  WatchEnd end = WatchEnd::kExpired;
  std::string error_body;
  absl::StatusOr<long> code = stream_.Run(
      *req,
      [&](std::string_view data) {
        size_t start = 0;
        for (size_t nl = data.find('\n'); nl != std::string_view::npos; nl = data.find('\n', start)) {
          std::string_view piece = data.substr(start, nl - start);
          start = nl + 1;
          bool ok;
          if (pending.empty()) {
            ok = HandleLine(piece, end);
          } else {
            pending.append(piece);
            ok = HandleLine(pending, end);
            pending.clear();
          }
          if (!ok) return false;
        }
        pending.append(data.substr(start));
        if (pending.size() > kMaxLineBytes) {
          Failed(absl::ResourceExhaustedError("watch " + options_.what + ": an event over 16 MiB"));
          end = WatchEnd::kFailed;
          return false;
        }
        return true;
      },
      &error_body);
  if (!code.ok()) {
    if (code.status().code() == absl::StatusCode::kCancelled) return WatchEnd::kStopped;
    if (end == WatchEnd::kExpired) {
      Failed(code.status());
      end = WatchEnd::kFailed;
    }
    return end;
  }
  if (*code == 410) return WatchEnd::kGone;
  if (*code < 200 || *code >= 300) {
    Failed(kube_->AnswerError(*req, *code, error_body));
    return WatchEnd::kFailed;
  }
  if (end == WatchEnd::kExpired) Recovered();  // a watch the server ended on time: all is well
  return end;
}

void Informer::Run() {
  bool need_list = true;
  bool quorum = false;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    if (need_list) {
      if (!List(quorum)) {
        if (!Backoff()) return;
        continue;
      }
      need_list = false;
      quorum = false;
    }
    switch (Watch()) {
      case WatchEnd::kStopped:
        return;
      case WatchEnd::kExpired:
        break;  // the server's timeout: watch again from rv_ at once
      case WatchEnd::kGone: {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.relists_gone++;
        need_list = true;
        quorum = true;
        break;
      }
      case WatchEnd::kFailed:
        if (!Backoff()) return;
        break;
    }
  }
}

}  // namespace epp::internal
