// What --shared-state costs (docs/benchmarks.md, "Shared state"): pick latency with shared state
// on against local only (p50/p99/p99.9, the two modes alternated in blocks in one run), Redis
// round trips and bytes per pick, and Redis memory per shared prefix block. A real redis-server
// runs on a Unix socket (started and stopped by pid); a second replica publishes as much as the
// measured one, so the measured replica's index also takes the other's updates while it picks.
//
//   epp_bench_shared_state [--endpoints N] [--picks N] [--blocks N] [--peer 0|1] [--rate PICKS_PER_S]
// --peer 0: the other replica picks nothing (the cost of publishing alone). --rate: each replica
// picks at this rate (the measured replica's picks alternate with the peer's); without it picks
// run back to back, far more than a replica serves, the worst case for applying the peer's.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "epp/config.h"
#include "epp/prefix_cache.h"
#include "epp/registry.h"
#include "epp/runtime/redis_state.h"
#include "epp/scheduler.h"
#include "testing/redis_server.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Replica {
  epp::SeededRng rng;
  std::unique_ptr<epp::RedisSharedState> state;
  std::shared_ptr<const epp::Scheduler> scheduler;
  std::vector<epp::Endpoint>* endpoints;
  Replica(uint64_t seed, const std::string& url, const std::string& id, std::vector<epp::Endpoint>* eps)
      : rng(seed), endpoints(eps) {
    epp::PluginContext ctx{&epp::SteadyClock::Get(), &rng};
    if (!url.empty()) {
      epp::SharedStateOptions o;
      o.address = url;
      o.replica_id = id;
      o.key_prefix = "bench:";
      state = *epp::RedisSharedState::Create(o);
      ctx.shared_prefix = state.get();
    }
    scheduler = std::shared_ptr<const epp::Scheduler>(*epp::BuildScheduler(epp::DefaultConfig(), epp::BuiltinRegistry(), ctx));
    if (state)
      state->Start([this] { return scheduler; },
                   [this] {
                     std::vector<std::string> out;
                     for (const epp::Endpoint& e : *endpoints) out.push_back(e.address);
                     return out;
                   },
                   nullptr);
  }
  ~Replica() {
    if (state) state->Stop();
    scheduler.reset();
  }
};

// A conversation's prompt: its own `blocks` blocks, then one more block per turn.
epp::InferenceRequest Request(int conversation, int turn, int blocks) {
  static const std::string kPath = "/v1/completions", kModel = "m";
  epp::InferenceRequest r;
  r.path = kPath;
  r.model = kModel;
  r.prompt = absl::StrCat("conversation ", conversation, " ");
  r.prompt.resize(static_cast<size_t>(blocks) * 64, static_cast<char>('a' + conversation % 26));
  r.prompt.append(static_cast<size_t>(turn) * 64, static_cast<char>('A' + turn));
  r.prompt_tokens = epp::ApproxTokens(r.prompt.size());
  return r;
}

double Pct(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

int64_t UsedMemory(const epp::RedisAddress& a) {
  auto c = epp::RedisConnection::Connect(a);
  if (!c.ok()) return -1;
  auto info = (*c)->Command({"INFO", "memory"});
  if (!info.ok()) return -1;
  const size_t at = info->text.find("used_memory:");
  return at == std::string::npos ? -1 : std::atoll(info->text.c_str() + at + 12);
}

}  // namespace

int main(int argc, char** argv) {
  int endpoints_n = 8, picks = 20000, blocks = 64, peer_on = 1;
  double rate = 0;  // picks per second per replica; 0: back to back
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--endpoints")) endpoints_n = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--picks")) picks = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--blocks")) blocks = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--peer")) peer_on = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--rate")) rate = std::atof(argv[i + 1]);
  }
  if (!epp::testing::RedisServerProcess::Available()) {
    std::fprintf(stderr, "redis-server is not installed (scripts/setup installs it)\n");
    return 2;
  }
  epp::testing::RedisServerProcess redis;
  if (!redis.WaitReady()) {
    std::fprintf(stderr, "redis-server did not start\n");
    return 1;
  }
  std::vector<epp::Endpoint> endpoints;
  for (int i = 0; i < endpoints_n; ++i) {
    epp::Endpoint e;
    e.address = "10.1." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1) + ":8000";
    e.metrics.waiting_queue_size = 0;
    e.metrics.running_requests = 0;
    e.metrics.kv_cache_usage = 0.1;
    e.metrics_time_us = epp::SteadyClock::Get().NowMicros();
    endpoints.push_back(e);
  }
  const int64_t before = UsedMemory(epp::RedisAddress{epp::RedisAddress::Transport::kUnix, "", 0, redis.socket_path()});
  Replica local(1, "", "", &endpoints);
  Replica shared(2, redis.url(), "measured", &endpoints);
  Replica peer(3, redis.url(), "peer", &endpoints);

  // Alternate the modes in blocks of 500 picks; the peer picks as often as the shared replica.
  std::vector<double> lat_local, lat_shared;
  const int block = 500;
  int conv = 0;
  for (int done = 0; done < picks; done += block) {
    for (int mode = 0; mode < 2; ++mode) {
      Replica& r = mode == 0 ? local : shared;
      std::vector<double>& out = mode == 0 ? lat_local : lat_shared;
      auto next = Clock::now();
      const auto step = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(rate > 0 ? 1.0 / rate : 0));
      for (int i = 0; i < block; ++i) {
        if (rate > 0) {
          next += step;
          std::this_thread::sleep_until(next);
        }
        const epp::InferenceRequest req = Request((conv + i) % 4000, i % 4, blocks);
        const auto t0 = Clock::now();
        epp::PickResult p = r.scheduler->Pick(req, endpoints);
        const auto t1 = Clock::now();
        out.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        r.scheduler->Release(p);
        if (mode == 1 && peer_on) peer.scheduler->Release(peer.scheduler->Pick(Request((conv + i + 7) % 4000, i % 4, blocks), endpoints));
      }
    }
    conv += block;
    const int64_t now = epp::SteadyClock::Get().NowMicros();
    for (epp::Endpoint& e : endpoints) e.metrics_time_us = now;
  }
  // Let the last updates travel.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const epp::SharedStateStats s = shared.state->stats();
  const epp::SharedStateStats sp = peer.state->stats();
  const int64_t after = UsedMemory(epp::RedisAddress{epp::RedisAddress::Transport::kUnix, "", 0, redis.socket_path()});
  const int64_t published_blocks = static_cast<int64_t>(s.published + sp.published) * blocks;

  std::printf("endpoints %d, picks %d per mode, %d-block prompts (64 chars = 16 tokens a block), GIE default profile, "
              "%s, peer %s\n",
              endpoints_n, static_cast<int>(lat_local.size()), blocks,
              rate > 0 ? (std::to_string(static_cast<int>(rate)) + " picks/s per replica").c_str() : "back to back",
              peer_on ? "picking" : "idle");
  std::printf("%-22s %9s %9s %9s\n", "pick latency (us)", "p50", "p99", "p99.9");
  std::printf("%-22s %9.2f %9.2f %9.2f\n", "local only", Pct(lat_local, 0.5), Pct(lat_local, 0.99), Pct(lat_local, 0.999));
  std::printf("%-22s %9.2f %9.2f %9.2f\n", "shared state (redis)", Pct(lat_shared, 0.5), Pct(lat_shared, 0.99),
              Pct(lat_shared, 0.999));
  std::printf("redis rounds %lld (errors %lld), updates published %lld, applied from the peer %lld, dropped %lld\n",
              static_cast<long long>(s.rounds), static_cast<long long>(s.errors), static_cast<long long>(s.published),
              static_cast<long long>(s.applied), static_cast<long long>(s.dropped));
  std::printf("per pick: %.4f round trips, %.0f bytes sent, %.0f bytes received\n",
              static_cast<double>(s.rounds) / static_cast<double>(lat_shared.size()),
              static_cast<double>(s.bytes_sent) / static_cast<double>(lat_shared.size()),
              static_cast<double>(s.bytes_received) / static_cast<double>(lat_shared.size()));
  if (before >= 0 && after >= 0 && published_blocks > 0)
    std::printf("redis memory: %.1f bytes per shared block (%lld blocks in the streams, used_memory +%lld bytes)\n",
                static_cast<double>(after - before) / static_cast<double>(published_blocks),
                static_cast<long long>(published_blocks), static_cast<long long>(after - before));
  return 0;
}
