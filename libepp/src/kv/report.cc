// KvSubscriptionsFor, LoadKvHistory and the explain renderings of what the index holds.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "epp/kv/subscriber.h"

namespace epp {

// The engine's publisher runs on the endpoint's host; llm-d's convention puts it at a fixed port
// there (socketPort), which is why discovery keeps the host and replaces the serving port.
std::vector<KvSubscription> KvSubscriptionsFor(const KvEventsBinding& b, std::span<const EndpointSpec> specs) {
  std::vector<KvSubscription> out;
  for (const EndpointSpec& s : specs) {
    KvSubscription sub;
    sub.endpoint = s.address;
    const size_t colon = s.address.rfind(':');
    const std::string host = colon == std::string::npos ? s.address : s.address.substr(0, colon);
    if (!s.kv_events.empty()) sub.address = s.kv_events;
    else if (b.discover_pods) sub.address = absl::StrCat("tcp://", host, ":", b.socket_port);
    else if (b.central_endpoint.empty()) continue;  // else: fed by the central socket (address "")
    if (!s.kv_events_replay.empty()) sub.replay_address = s.kv_events_replay;
    else if (s.kv_events.empty() && b.discover_pods && b.replay_socket_port > 0)
      sub.replay_address = absl::StrCat("tcp://", host, ":", b.replay_socket_port);
    out.push_back(std::move(sub));
  }
  return out;
}

std::vector<KvEndpointStats> LoadKvHistory(const KvEventsBinding& b, std::span<const EndpointSpec> specs,
                                           std::chrono::milliseconds timeout, const Logger* log) {
  KvSubscriberOptions o;
  o.topic_filter = b.topic_filter;
  o.replay_timeout = timeout;
  o.log = log;
  KvEventSubscriber sub(b.index.get(), o);
  std::vector<KvSubscription> subs = KvSubscriptionsFor(b, specs);
  // Engines that connect to a serving EPP's central socket cannot be asked from here.
  subs.erase(std::remove_if(subs.begin(), subs.end(), [](const KvSubscription& s) { return s.address.empty(); }),
             subs.end());
  // Replays finish on their own (the end marker); an endpoint without a replay socket can only
  // be listened to, for the whole timeout.
  bool live_only = false;
  for (const KvSubscription& s : subs) live_only = live_only || s.replay_address.empty();
  sub.SetSubscriptions(std::move(subs));
  sub.PollOnce(std::chrono::milliseconds(0));  // connects and replays every endpoint that can
  if (live_only) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until) sub.PollOnce(std::chrono::milliseconds(20));
  }
  return sub.Stats();
}

namespace {

struct Row {
  KvEndpointSummary held;
  const KvEndpointStats* stats = nullptr;
};

// One row per endpoint that either holds blocks or has a subscription, sorted by name, so an
// endpoint subscribed but silent still shows (with "no batch yet").
std::map<std::string, Row> Rows(const KvBlockIndex& index, std::span<const KvEndpointStats> stats) {
  std::map<std::string, Row> rows;
  for (const KvEndpointSummary& h : index.Endpoints()) rows[h.endpoint].held = h;
  for (const KvEndpointStats& s : stats) {
    Row& r = rows[s.endpoint];
    r.held.endpoint = s.endpoint;
    r.stats = &s;
  }
  return rows;
}

}  // namespace

std::string KvHoldingsText(const KvBlockIndex& index, std::span<const KvEndpointStats> stats, int64_t now_unix_us) {
  std::string out;
  for (const auto& [endpoint, r] : Rows(index, stats)) {
    absl::StrAppend(&out, "kv events  ", endpoint, "  ", r.held.blocks, r.held.blocks == 1 ? " block" : " blocks");
    if (!r.held.media.empty()) {
      std::string media;
      for (const auto& [m, n] : r.held.media) absl::StrAppend(&media, media.empty() ? "" : ", ", m, " ", n);
      absl::StrAppend(&out, " (", media, ")");
    }
    if (r.held.speculative > 0) absl::StrAppend(&out, " + ", r.held.speculative, " speculative");
    if (r.stats) {
      if (r.stats->last_event_unix_us > 0) {
        // Age from the batch's own timestamp: a replayed batch arrives now but was published earlier.
        char age[32];
        std::snprintf(age, sizeof age, "%.1f", static_cast<double>(now_unix_us) / 1e6 - r.stats->last_batch_ts);
        absl::StrAppend(&out, "  last batch published ", age, " s ago (seq ", r.stats->last_seq, ")");
      } else {
        absl::StrAppend(&out, "  no batch yet");
      }
      absl::StrAppend(&out, "  via ", r.stats->address);
      if (r.stats->replays > 0) absl::StrAppend(&out, ", ", r.stats->replays, r.stats->replays == 1 ? " replay" : " replays");
      if (!r.stats->last_error.empty()) absl::StrAppend(&out, "  [", r.stats->last_error, "]");
    }
    out += "\n";
  }
  return out;
}

std::string KvHoldingsJson(const KvBlockIndex& index, std::span<const KvEndpointStats> stats, int64_t now_unix_us) {
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (const auto& [endpoint, r] : Rows(index, stats)) {
    nlohmann::ordered_json j = {{"endpoint", endpoint}, {"blocks", r.held.blocks}, {"media", r.held.media},
                                {"speculative", r.held.speculative}};
    if (r.stats) {
      j["address"] = r.stats->address;
      j["batches"] = r.stats->batches;
      j["last_sequence"] = r.stats->last_seq;
      j["last_event_age_s"] = r.stats->last_event_unix_us > 0
                                  ? nlohmann::ordered_json(static_cast<double>(now_unix_us) / 1e6 - r.stats->last_batch_ts)
                                  : nlohmann::ordered_json(nullptr);
      j["replays"] = r.stats->replays;
      j["resets"] = r.stats->resets;
      j["malformed"] = r.stats->malformed;
      if (!r.stats->last_error.empty()) j["error"] = r.stats->last_error;
    }
    arr.push_back(std::move(j));
  }
  return internal::DumpJsonLossy(arr, -1);
}

}  // namespace epp
