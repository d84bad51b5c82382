// The simulator's cost model. See sim.h for the model and docs/sim.md for the formulas.
#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <list>

#include "absl/container/flat_hash_map.h"
#include "epp/tools/sim.h"

namespace epp {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

// vLLM's bucket bounds for time-to-first-token and request latency histograms.
const std::vector<double>& TtftBounds() {
  static const std::vector<double> kB = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                         1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
  return kB;
}
const std::vector<double>& LatencyBounds() {
  static const std::vector<double> kB = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,  15.0, 20.0,
                                         30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
  return kB;
}

SimHistogram MakeHistogram(const std::vector<double>& bounds) {
  SimHistogram h;
  h.bounds = bounds;
  h.counts.assign(bounds.size() + 1, 0);
  return h;
}

}  // namespace

void SimHistogram::Observe(double v) {
  size_t i = std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin();
  counts[i]++;
  count++;
  sum += v;
}

absl::Status SimParams::Validate() const {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError("simulator: " + what); };
  if (engine != "vllm" && engine != "sglang" && engine != "trtllm-serve") {
    return bad("engine must be vllm, sglang or trtllm-serve, not '" + engine + "'");
  }
  if (models.empty()) return bad("at least one model is required");
  for (const std::string& m : models) {
    if (m.empty()) return bad("model names must not be empty");
  }
  for (const std::string& l : loras) {
    if (l.empty()) return bad("LoRA names must not be empty");
    if (std::find(models.begin(), models.end(), l) != models.end()) return bad("LoRA '" + l + "' is also a model name");
  }
  if (max_loras < 1) return bad("max_loras must be >= 1");
  if (max_running < 1) return bad("max_running must be >= 1");
  if (kv_blocks < 1) return bad("kv_blocks must be >= 1");
  if (block_size < 1) return bad("block_size must be >= 1");
  if (!(prefill_tokens_per_s > 0) || !std::isfinite(prefill_tokens_per_s)) return bad("prefill_tokens_per_s must be > 0");
  if (!(decode_step_ms > 0) || !std::isfinite(decode_step_ms)) return bad("decode_step_ms must be > 0");
  if (!(decode_ms_per_seq >= 0) || !std::isfinite(decode_ms_per_seq)) return bad("decode_ms_per_seq must be >= 0");
  if (!(lora_load_ms >= 0) || !std::isfinite(lora_load_ms)) return bad("lora_load_ms must be >= 0");
  return absl::OkStatus();
}

struct SimServer::Impl {
  struct Req {
    SimRequest req;
    SimRequestResult res;
    int64_t generated = 0;
    int64_t private_blocks = 0;
    int64_t prefill_tokens = 0;
    bool running = false;
  };
  struct Block {
    int ref = 0;
    std::list<uint64_t>::iterator lru_it;
  };

  SimParams p;
  int64_t now = 0;
  absl::flat_hash_map<uint64_t, Req> reqs;
  std::deque<uint64_t> waiting;
  std::vector<uint64_t> running;
  absl::flat_hash_map<uint64_t, SimRequestResult> done;

  absl::flat_hash_map<uint64_t, Block> cache;
  std::list<uint64_t> lru;  // unpinned cached blocks, front = least recently used
  int64_t pinned = 0;
  int64_t private_total = 0;

  std::list<std::string> resident;  // front = least recently used
  absl::flat_hash_map<std::string, int64_t> loading;  // adapter -> ready time
  absl::flat_hash_map<std::string, int> adapter_running;
  int64_t lora_changed = 0;

  std::vector<KvEvent> kv_events;  // SimParams::kv_events: since the last TakeKvEvents

  bool stepping = false;
  int64_t step_start = 0, step_dur = 0, step_k = 0, step_prefill = 0;
  std::vector<uint64_t> admitted_in_step;

  SimSnapshot stats;

  int64_t StepEnd() const { return step_start + step_k * step_dur; }

  int64_t NextEvent() const {
    int64_t t = stepping ? StepEnd() : kNever;
    for (const auto& [name, ready] : loading) t = std::min(t, ready);
    return t;
  }

  bool IsResident(const std::string& a) const {
    return std::find(resident.begin(), resident.end(), a) != resident.end();
  }

  // Starts loading `adapter` if a slot is free or an idle adapter can be evicted.
  void TryLoad(const std::string& adapter) {
    if (loading.contains(adapter)) return;
    if (static_cast<int>(resident.size() + loading.size()) >= p.max_loras) {
      auto victim = std::find_if(resident.begin(), resident.end(), [&](const std::string& a) {
        auto it = adapter_running.find(a);
        return it == adapter_running.end() || it->second == 0;
      });
      if (victim == resident.end()) return;
      resident.erase(victim);
    }
    loading[adapter] = now + static_cast<int64_t>(std::llround(p.lora_load_ms * 1000));
  }

  void ResolveLoads() {
    for (auto it = loading.begin(); it != loading.end();) {
      if (it->second <= now) {
        resident.push_back(it->first);
        loading.erase(it++);
      } else {
        ++it;
      }
    }
  }

  bool TryAllocate(Req& r) {
    const auto& hashes = r.req.block_hashes;
    const int64_t bs = p.block_size;
    const int64_t total = (r.req.prompt_tokens + r.req.output_tokens + bs - 1) / bs;
    const int64_t full = static_cast<int64_t>(hashes.size());
    int64_t hit = 0;
    int64_t hits_unpinned = 0;
    while (hit < full) {
      auto it = cache.find(hashes[hit]);
      if (it == cache.end()) break;
      if (it->second.ref == 0) ++hits_unpinned;
      ++hit;
    }
    const int64_t priv = std::max<int64_t>(0, total - full);
    const int64_t need = (full - hit) + priv;
    const int64_t unpinned = static_cast<int64_t>(lru.size());
    const int64_t free_now = p.kv_blocks - (pinned + unpinned + private_total);
    if (free_now + (unpinned - hits_unpinned) < need) return false;
    for (int64_t i = 0; i < hit; ++i) {
      Block& b = cache[hashes[i]];
      if (b.ref++ == 0) {
        lru.erase(b.lru_it);
        ++pinned;
      }
    }
    KvBlockRemoved evicted;
    while (p.kv_blocks - (pinned + static_cast<int64_t>(lru.size()) + private_total) < need) {
      if (p.kv_events) evicted.block_hashes.push_back(lru.front());
      cache.erase(lru.front());
      lru.pop_front();
    }
    if (!evicted.block_hashes.empty()) {
      evicted.medium = "GPU";
      kv_events.emplace_back(std::move(evicted));
    }
    KvBlockStored stored;
    for (int64_t i = hit; i < full; ++i) {
      auto [it, inserted] = cache.try_emplace(hashes[i]);
      Block& b = it->second;
      if (b.ref++ == 0) ++pinned;
      if (p.kv_events) stored.block_hashes.push_back(hashes[i]);  // known ones again: harmless, keeps tokens dense
      (void)inserted;
    }
    // One event per request: the blocks it added, chained from the last block it found cached.
    // Only with the tokens to show (a request without token_ids stores blocks silently).
    if (!stored.block_hashes.empty() && static_cast<int64_t>(r.req.token_ids.size()) >= full * bs) {
      if (hit > 0) stored.parent_block_hash = hashes[hit - 1];
      stored.token_ids.assign(r.req.token_ids.begin() + hit * bs, r.req.token_ids.begin() + full * bs);
      stored.block_size = bs;
      stored.medium = "GPU";
      if (!r.req.adapter.empty()) stored.lora_name = r.req.adapter;
      kv_events.emplace_back(std::move(stored));
    }
    r.private_blocks = priv;
    private_total += priv;
    int64_t cached_tokens = std::min(hit * bs, r.req.prompt_tokens - 1);
    r.res.cached_tokens = cached_tokens;
    // KV that arrived from a prefill server (disaggregated P/D) costs no prefill compute here.
    r.prefill_tokens = std::max<int64_t>(0, r.req.prompt_tokens - cached_tokens - r.req.remote_prefilled_tokens);
    stats.prefix_query_tokens_total += r.req.prompt_tokens;
    stats.prefix_hit_tokens_total += cached_tokens;
    return true;
  }

  void Release(Req& r) {
    const auto& hashes = r.req.block_hashes;
    // Free tail blocks first so they are evicted before the prefix they extend.
    for (auto it = hashes.rbegin(); it != hashes.rend(); ++it) {
      auto c = cache.find(*it);
      if (c == cache.end()) continue;
      if (--c->second.ref == 0) {
        lru.push_back(*it);
        c->second.lru_it = std::prev(lru.end());
        --pinned;
      }
    }
    private_total -= r.private_blocks;
  }

  int64_t Admit() {
    int64_t prefill = 0;
    for (auto it = waiting.begin(); it != waiting.end();) {
      if (static_cast<int>(running.size()) >= p.max_running) break;
      Req& r = reqs[*it];
      const std::string& a = r.req.adapter;
      if (!a.empty()) {
        if (IsResident(a)) {
          resident.remove(a);
          resident.push_back(a);
        } else {
          TryLoad(a);
          ++it;  // waits for its adapter; others may go ahead
          continue;
        }
      }
      if (!TryAllocate(r)) break;  // FCFS on memory: nothing overtakes a request that does not fit
      r.running = true;
      r.res.admitted_us = now;
      if (!a.empty()) {
        adapter_running[a]++;
        lora_changed = now;
      }
      prefill += r.prefill_tokens;
      running.push_back(r.req.id);
      admitted_in_step.push_back(r.req.id);
      stats.queue_s.Observe((now - r.res.arrival_us) / 1e6);
      it = waiting.erase(it);
    }
    return prefill;
  }

  void StartStep() {
    admitted_in_step.clear();
    step_prefill = Admit();
    step_start = now;
    PlanStep();
  }

  // Sets the duration and length of the step that starts at step_start, from the running batch
  // and the prefill work admitted into it.
  void PlanStep() {
    if (running.empty()) {
      stepping = false;
      return;
    }
    const double n = static_cast<double>(running.size());
    step_dur = std::llround((p.decode_step_ms + p.decode_ms_per_seq * n) * 1000.0) +
               std::llround(static_cast<double>(step_prefill) * 1e6 / p.prefill_tokens_per_s);
    if (step_dur < 1) step_dur = 1;
    step_k = 1;
    if (admitted_in_step.empty() && loading.empty()) {
      // Nothing changes until the first running request completes: take those steps at once.
      int64_t k = kNever;
      for (uint64_t id : running) {
        const Req& r = reqs[id];
        k = std::min(k, r.req.output_tokens - r.generated);
      }
      step_k = std::max<int64_t>(1, k);
    }
    stepping = true;
  }

  void FinishStep(std::vector<SimEvent>* events) {
    now = StepEnd();
    stepping = false;
    for (uint64_t id : admitted_in_step) {
      Req& r = reqs[id];
      r.res.first_token_us = now;
      stats.ttft_s.Observe((now - r.res.arrival_us) / 1e6);
      if (events) events->push_back({SimEvent::Kind::kFirstToken, id, now});
    }
    admitted_in_step.clear();
    std::vector<uint64_t> still;
    still.reserve(running.size());
    for (uint64_t id : running) {
      Req& r = reqs[id];
      r.generated += step_k;
      stats.generation_tokens_total += step_k;
      if (r.generated >= r.req.output_tokens) {
        r.res.finish_us = now;
        r.res.output_tokens = r.req.output_tokens;
        Release(r);
        if (!r.req.adapter.empty()) {
          adapter_running[r.req.adapter]--;
          lora_changed = now;
        }
        stats.e2e_s.Observe((now - r.res.arrival_us) / 1e6);
        stats.requests_finished++;
        if (events) events->push_back({SimEvent::Kind::kFinished, id, now});
        done[id] = r.res;
        reqs.erase(id);
      } else {
        still.push_back(id);
      }
    }
    running.swap(still);
  }

  void Advance(int64_t t, std::vector<SimEvent>* events) {
    for (;;) {
      const int64_t next = NextEvent();
      if (next > t) break;
      now = std::max(now, next);
      if (stepping && StepEnd() == next) FinishStep(events);
      ResolveLoads();
      if (!stepping) StartStep();
    }
    now = std::max(now, t);
  }
};

SimServer::SimServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SimServer::~SimServer() = default;

absl::StatusOr<std::unique_ptr<SimServer>> SimServer::Create(const SimParams& params) {
  EPP_RETURN_IF_ERROR(params.Validate());
  auto impl = std::make_unique<Impl>();
  impl->p = params;
  impl->stats.ttft_s = MakeHistogram(TtftBounds());
  impl->stats.e2e_s = MakeHistogram(LatencyBounds());
  impl->stats.queue_s = MakeHistogram(LatencyBounds());
  return std::unique_ptr<SimServer>(new SimServer(std::move(impl)));
}

const SimParams& SimServer::params() const { return impl_->p; }
int64_t SimServer::now_us() const { return impl_->now; }
int64_t SimServer::NextEventTime() const { return impl_->NextEvent(); }

void SimServer::AdvanceTo(int64_t t_us, std::vector<SimEvent>* events) { impl_->Advance(t_us, events); }

absl::Status SimServer::Submit(const SimRequest& request, int64_t t_us, std::vector<SimEvent>* events) {
  Impl& m = *impl_;
  if (request.prompt_tokens < 1 || request.output_tokens < 1) {
    return absl::InvalidArgumentError("simulator: prompt_tokens and output_tokens must be >= 1");
  }
  if (request.remote_prefilled_tokens < 0 || request.remote_prefilled_tokens > request.prompt_tokens) {
    return absl::InvalidArgumentError("simulator: remote_prefilled_tokens must be in [0, prompt_tokens]");
  }
  if (static_cast<int64_t>(request.block_hashes.size()) * m.p.block_size > request.prompt_tokens) {
    return absl::InvalidArgumentError("simulator: more full blocks than prompt tokens");
  }
  if (m.reqs.contains(request.id) || m.done.contains(request.id)) {
    return absl::InvalidArgumentError("simulator: duplicate request id " + std::to_string(request.id));
  }
  if (!request.adapter.empty() &&
      std::find(m.p.loras.begin(), m.p.loras.end(), request.adapter) == m.p.loras.end()) {
    return absl::InvalidArgumentError("simulator: unknown LoRA adapter '" + request.adapter + "'");
  }
  m.Advance(std::max(t_us, m.now), events);
  Impl::Req r;
  r.req = request;
  r.res.id = request.id;
  r.res.arrival_us = m.now;
  r.res.prompt_tokens = request.prompt_tokens;
  m.stats.prompt_tokens_total += request.prompt_tokens;
  const int64_t need = (request.prompt_tokens + request.output_tokens + m.p.block_size - 1) / m.p.block_size;
  if (need > m.p.kv_blocks) {
    r.res.rejected = true;
    m.stats.requests_rejected++;
    m.done[request.id] = r.res;
    if (events) events->push_back({SimEvent::Kind::kRejected, request.id, m.now});
    return absl::OkStatus();
  }
  if (!request.adapter.empty()) m.lora_changed = m.now;
  m.reqs.emplace(request.id, std::move(r));
  m.waiting.push_back(request.id);
  if (m.stepping && m.step_start == m.now) {
    // The step begins at this very instant: the scheduler sees every request that arrived by now.
    m.step_prefill += m.Admit();
    m.PlanStep();
  } else if (m.stepping && m.step_k > 1) {
    // Cut the multi-step run at the end of the step in progress so the newcomer is admitted then.
    m.step_k = (m.now - m.step_start) / m.step_dur + 1;
  }
  if (!m.stepping) m.StartStep();
  return absl::OkStatus();
}

std::optional<int64_t> SimServer::Progress(uint64_t id) const {
  const Impl& m = *impl_;
  if (auto it = m.done.find(id); it != m.done.end()) return it->second.output_tokens;
  auto it = m.reqs.find(id);
  if (it == m.reqs.end()) return std::nullopt;
  int64_t g = it->second.generated;
  if (it->second.running && m.stepping && m.step_dur > 0) {
    g += std::min(m.step_k, (m.now - m.step_start) / m.step_dur);
  }
  return g;
}

std::optional<SimRequestResult> SimServer::TakeResult(uint64_t id) {
  auto it = impl_->done.find(id);
  if (it == impl_->done.end()) return std::nullopt;
  SimRequestResult r = it->second;
  impl_->done.erase(it);
  return r;
}

std::vector<KvEvent> SimServer::TakeKvEvents() {
  std::vector<KvEvent> out;
  out.swap(impl_->kv_events);
  return out;
}

int64_t SimServer::CachedPrefixBlocks(std::span<const uint64_t> hashes) const {
  int64_t n = 0;
  for (uint64_t h : hashes) {
    if (!impl_->cache.contains(h)) break;
    ++n;
  }
  return n;
}

SimSnapshot SimServer::Snapshot() const {
  const Impl& m = *impl_;
  SimSnapshot s = m.stats;
  s.now_us = m.now;
  s.waiting = static_cast<int>(m.waiting.size());
  s.running = static_cast<int>(m.running.size());
  s.kv_blocks_used = m.pinned + m.private_total;
  s.kv_usage = static_cast<double>(s.kv_blocks_used) / static_cast<double>(m.p.kv_blocks);
  s.cached_blocks = static_cast<int64_t>(m.cache.size());
  for (uint64_t id : m.running) {
    const std::string& a = m.reqs.at(id).req.adapter;
    if (!a.empty() && std::find(s.running_adapters.begin(), s.running_adapters.end(), a) == s.running_adapters.end())
      s.running_adapters.push_back(a);
  }
  for (uint64_t id : m.waiting) {
    const std::string& a = m.reqs.at(id).req.adapter;
    if (!a.empty() && std::find(s.waiting_adapters.begin(), s.waiting_adapters.end(), a) == s.waiting_adapters.end())
      s.waiting_adapters.push_back(a);
  }
  s.resident_adapters.assign(m.resident.begin(), m.resident.end());
  s.lora_changed_us = m.lora_changed;
  return s;
}

}  // namespace epp
