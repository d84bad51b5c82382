// The latency predictor: sample rings, the ridge fits and the published snapshot (predictor.h
// says what and why).
#include "latency/predictor.h"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace epp::latency {
namespace {

// One observation as stored: the raw features (floats: 7 significant digits are plenty for
// counts and seconds) and the two targets (tpot NaN when unknown).
struct Sample {
  float kv, waiting, running, input, hit, inflight_requests, inflight_prefill, enc_in, enc_matched;
  float ttft, tpot;
};
static_assert(sizeof(Sample) == 44);

Sample ToSample(const LatencyFeatures& f, double ttft, double tpot) {
  return Sample{static_cast<float>(f.kv_cache_usage),    static_cast<float>(f.waiting_requests),
                static_cast<float>(f.running_requests),  static_cast<float>(f.input_tokens),
                static_cast<float>(f.prefix_hit_tokens), static_cast<float>(f.inflight_requests),
                static_cast<float>(f.inflight_prefill_tokens), static_cast<float>(f.encoder_input_size),
                static_cast<float>(f.encoder_matched_size), static_cast<float>(ttft), static_cast<float>(tpot)};
}

LatencyFeatures FromSample(const Sample& s) {
  LatencyFeatures f;
  f.kv_cache_usage = s.kv;
  f.waiting_requests = s.waiting;
  f.running_requests = s.running;
  f.input_tokens = s.input;
  f.prefix_hit_tokens = s.hit;
  f.inflight_requests = s.inflight_requests;
  f.inflight_prefill_tokens = s.inflight_prefill;
  f.encoder_input_size = s.enc_in;
  f.encoder_matched_size = s.enc_matched;
  return f;
}

// Appends to a ring of `capacity` samples; once full, overwrites the oldest (`next`).
void PushRing(std::vector<Sample>& ring, size_t& next, size_t capacity, const Sample& s) {
  if (ring.size() < capacity) {
    ring.push_back(s);
  } else {
    ring[next] = s;
    next = (next + 1) % ring.size();
  }
}

// Debian's Abseil has its own string_view: heterogeneous lookups take that one.
absl::string_view Key(std::string_view s) { return absl::string_view(s.data(), s.size()); }

bool Usable(double v) { return std::isfinite(v) && v >= 0; }

struct Row {
  DesignRow x;
  double y;
};

// Standardization of the columns (the pool's, shared by every fit of a round so an endpoint's
// slopes are comparable with the pool's, the prior). A column without variance is left out.
struct Scaling {
  DesignRow mean{}, sd{};
  std::array<bool, kColumns> use{};
};

Scaling ScaleOf(const std::vector<Row>& rows) {
  Scaling s;
  if (rows.empty()) return s;
  const double n = static_cast<double>(rows.size());
  for (const Row& r : rows)
    for (size_t j = 0; j < kColumns; ++j) s.mean[j] += r.x[j];
  for (size_t j = 0; j < kColumns; ++j) s.mean[j] /= n;
  for (const Row& r : rows)
    for (size_t j = 0; j < kColumns; ++j) s.sd[j] += (r.x[j] - s.mean[j]) * (r.x[j] - s.mean[j]);
  for (size_t j = 0; j < kColumns; ++j) {
    s.sd[j] = std::sqrt(s.sd[j] / n);
    s.use[j] = s.sd[j] > 1e-9 * std::max(1.0, std::abs(s.mean[j]));
    if (!s.use[j]) s.sd[j] = 1;
  }
  return s;
}

// A fit in standardized units: y = b + sum(beta[j] * (x[j] - mean[j]) / sd[j]).
struct StdFit {
  double b = 0;
  DesignRow beta{};
};

constexpr size_t kP = kColumns + 1;  // the intercept, then the columns

// Solves A x = r for a symmetric positive definite A (kP x kP, row-major) by Cholesky; false
// when A is not positive definite.
bool CholeskySolve(std::array<double, kP * kP>& a, std::array<double, kP>& r) {
  for (size_t i = 0; i < kP; ++i) {
    for (size_t j = 0; j <= i; ++j) {
      double sum = a[i * kP + j];
      for (size_t k = 0; k < j; ++k) sum -= a[i * kP + k] * a[j * kP + k];
      if (i == j) {
        if (!(sum > 0)) return false;
        a[i * kP + i] = std::sqrt(sum);
      } else {
        a[i * kP + j] = sum / a[j * kP + j];
      }
    }
  }
  for (size_t i = 0; i < kP; ++i) {  // L y = r
    double sum = r[i];
    for (size_t k = 0; k < i; ++k) sum -= a[i * kP + k] * r[k];
    r[i] = sum / a[i * kP + i];
  }
  for (size_t i = kP; i-- > 0;) {  // L^T x = y
    double sum = r[i];
    for (size_t k = i + 1; k < kP; ++k) sum -= a[k * kP + i] * r[k];
    r[i] = sum / a[i * kP + i];
  }
  return true;
}

// Weighted ridge toward `prior` (standardized slopes; the intercept is not penalized). Weights
// 1/y^2, normalized to mean 1, so the loss is the squared relative error and `lambda` counts
// in samples.
StdFit Solve(const std::vector<Row>& rows, const Scaling& sc, const DesignRow& prior, double lambda) {
  std::array<double, kP * kP> a{};
  std::array<double, kP> r{};
  double wsum = 0;
  for (const Row& row : rows) wsum += 1.0 / (row.y * row.y);
  const double norm = static_cast<double>(rows.size()) / wsum;
  std::array<double, kP> z{};
  for (const Row& row : rows) {
    const double w = norm / (row.y * row.y);
    z[0] = 1;
    for (size_t j = 0; j < kColumns; ++j) z[j + 1] = sc.use[j] ? (row.x[j] - sc.mean[j]) / sc.sd[j] : 0;
    for (size_t i = 0; i < kP; ++i) {
      const double wz = w * z[i];
      if (wz == 0) continue;
      for (size_t j = 0; j <= i; ++j) a[i * kP + j] += wz * z[j];
      r[i] += wz * row.y;
    }
  }
  for (size_t j = 0; j < kColumns; ++j) {
    const size_t d = (j + 1) * kP + (j + 1);
    if (sc.use[j]) {
      a[d] += lambda;
      r[j + 1] += lambda * prior[j];
    } else {
      a[d] += 1;  // a zero column: its slope stays 0
    }
  }
  for (size_t i = 0; i < kP; ++i)
    for (size_t j = i + 1; j < kP; ++j) a[i * kP + j] = a[j * kP + i];
  StdFit fit;
  if (!CholeskySolve(a, r)) {
    // Not positive definite only through rounding on degenerate data: fall back to the prior
    // slopes and the weighted mean.
    fit.beta = prior;
    double m = 0;
    for (const Row& row : rows) m += norm / (row.y * row.y) * row.y;
    fit.b = m / static_cast<double>(rows.size());
    return fit;
  }
  fit.b = r[0];
  for (size_t j = 0; j < kColumns; ++j) fit.beta[j] = sc.use[j] ? r[j + 1] : 0;
  return fit;
}

// A standardized fit in raw units, with its floor and its upper-estimate scale from `rows`.
LinearFit ToRaw(const StdFit& f, const Scaling& sc, const std::vector<Row>& rows, double quantile) {
  LinearFit out;
  out.intercept = f.b;
  for (size_t j = 0; j < kColumns; ++j) {
    out.weights[j] = f.beta[j] / sc.sd[j];
    out.intercept -= f.beta[j] * sc.mean[j] / sc.sd[j];
  }
  double min_y = rows.front().y;
  for (const Row& row : rows) min_y = std::min(min_y, row.y);
  out.floor_s = 0.5 * min_y;
  std::vector<double> ratios;
  ratios.reserve(rows.size());
  for (const Row& row : rows) ratios.push_back(row.y / out.Eval(row.x));
  const size_t k = std::min(ratios.size() - 1, static_cast<size_t>(quantile * static_cast<double>(ratios.size())));
  std::nth_element(ratios.begin(), ratios.begin() + static_cast<std::ptrdiff_t>(k), ratios.end());
  out.upper_scale = ratios[k];
  out.samples = static_cast<int64_t>(rows.size());
  return out;
}

// The rows of one target: TTFT, or TPOT where known.
void AppendRows(const std::vector<Sample>& samples, bool tpot, std::vector<Row>& out) {
  for (const Sample& s : samples) {
    const double y = tpot ? s.tpot : s.ttft;
    if (!(y > 0)) continue;  // NaN: not observed
    out.push_back(Row{Design(FromSample(s)), y});
  }
}

uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

DesignRow Design(const LatencyFeatures& f) {
  const double input = f.input_tokens;
  const double hit = std::clamp(f.prefix_hit_tokens, 0.0, input);
  const double uncached = input - hit;
  const double enc_matched = std::clamp(f.encoder_matched_size, 0.0, f.encoder_input_size);
  return DesignRow{uncached,
                   hit,
                   uncached * input / 1000.0,
                   f.waiting_requests,
                   f.running_requests,
                   f.kv_cache_usage,
                   f.inflight_requests,
                   f.inflight_prefill_tokens,
                   f.encoder_input_size - enc_matched,
                   enc_matched};
}

bool IsLightlyLoaded(const LatencyFeatures& f) { return f.waiting_requests < 0.5 && f.inflight_prefill_tokens < 0.5; }

double LinearFit::Eval(const DesignRow& x) const {
  double y = intercept;
  for (size_t j = 0; j < kColumns; ++j) y += weights[j] * x[j];
  return std::max(y, floor_s);
}

absl::Status LatencyPredictorOptions::Validate() const {
  if (max_endpoints < 1) return absl::InvalidArgumentError("latency predictor: max_endpoints must be >= 1");
  if (samples_per_endpoint < 2) return absl::InvalidArgumentError("latency predictor: samples_per_endpoint must be >= 2");
  if (min_endpoint_samples < 2 || min_endpoint_samples > samples_per_endpoint)
    return absl::InvalidArgumentError("latency predictor: min_endpoint_samples must be in [2, samples_per_endpoint]");
  if (max_pool_samples < min_endpoint_samples)
    return absl::InvalidArgumentError("latency predictor: max_pool_samples must be >= min_endpoint_samples");
  if (!(prior_strength > 0) || !std::isfinite(prior_strength))
    return absl::InvalidArgumentError("latency predictor: prior_strength must be > 0");
  if (!(ridge_lambda > 0) || !std::isfinite(ridge_lambda))
    return absl::InvalidArgumentError("latency predictor: ridge_lambda must be > 0");
  if (!(quantile > 0 && quantile < 1)) return absl::InvalidArgumentError("latency predictor: quantile must be in (0, 1)");
  if (idle_evict_us <= 0) return absl::InvalidArgumentError("latency predictor: idle_evict_us must be > 0");
  if (train_interval_ms <= 0) return absl::InvalidArgumentError("latency predictor: train_interval_ms must be > 0");
  if (clock == nullptr) return absl::InvalidArgumentError("latency predictor: clock must be set");
  return absl::OkStatus();
}

const EndpointModel* LatencySnapshot::Find(std::string_view endpoint) const {
  const auto it = models_.find(Key(endpoint));
  return it == models_.end() ? nullptr : &it->second;
}

LatencyPrediction LatencySnapshot::Predict(std::string_view endpoint, const LatencyFeatures& features) const {
  LatencyPrediction p;
  const EndpointModel* m = Find(endpoint);
  if (m == nullptr) m = &pool_;
  if (m->ttft.samples == 0) return p;
  const DesignRow x = Design(features);
  p.ttft_s = m->ttft.Eval(x);
  p.ttft_upper_s = p.ttft_s * m->ttft.upper_scale;
  p.pool_ttft_s = m == &pool_ ? p.ttft_s : pool_.ttft.Eval(x);
  if (m->tpot.samples > 0) {
    p.tpot_s = m->tpot.Eval(x);
    p.tpot_upper_s = p.tpot_s * m->tpot.upper_scale;
  }
  p.light_speed = m->light_speed;
  p.light_rate_tps = m->light_rate_tps;
  p.busy_rate_tps = m->busy_rate_tps;
  p.samples = m->ttft.samples;
  p.from_prior = m->from_prior;
  return p;
}

struct LatencyPredictor::Store {
  explicit Store(size_t capacity) { ring.reserve(capacity); }
  std::mutex mu;
  std::vector<Sample> ring;  // full once size() == capacity; then `next` is the oldest
  size_t next = 0;
  std::atomic<int64_t> last_us{0};
  // The lightly loaded TTFT samples (IsLightlyLoaded), in a ring of their own: a saturated
  // server adds none, and its speed stays what they said.
  std::vector<Sample> light;
  size_t light_next = 0;

  // The samples, oldest first. REQUIRES: mu held.
  std::vector<Sample> Chronological() const {
    std::vector<Sample> out;
    out.reserve(ring.size());
    out.insert(out.end(), ring.begin() + static_cast<std::ptrdiff_t>(next), ring.end());
    out.insert(out.end(), ring.begin(), ring.begin() + static_cast<std::ptrdiff_t>(next));
    return out;
  }
};

namespace {

// EndpointModel::light_speed and light_rate_tps from each endpoint's light samples: the model is
// TTFT = b_i * (c + u + g * running), in relative error (weighted by 1/TTFT^2 like the fits), where
// u is the uncached prompt tokens, c a fixed part and g the work each running request adds to a
// prefill step (its decode), both in token-equivalents and shared by the pool, and b_i the
// endpoint's seconds per token: a faster GPU shortens all three alike, so a speed is one scale
// factor per endpoint and 1 / b_i is its prefill rate in tokens per second. Fitted by alternating:
// b_i given c and g in closed form over the endpoint's samples whose scale TTFT / (c + u + g *
// running) is within kLightOutlier of the median scale (u is what the EPP's index believed
// uncached: a response whose prompt the server had cached anyway answers in a step, its scale a
// fraction of the truth, and with 1/TTFT^2 weights a few of them carried the fit: on the Mooncake
// trace one server read 26x its rate); then c and g, both >= 0, in closed form given the b_i.
// (The median itself as b_i was tried: it reads the conversation pools' rates differently, and
// lost 29 points of SLO attainment on one seed; docs/latency.md.) Not a slope with a fixed intercept: a
// TTFT ratio or a slope against an unscaled fixed part reads a mixed pool's spread wrongly (TTFT
// ratios 1.2 / 1.0 / 0.8 on the simulator's 1.5 / 1 / 0.5 pool, slopes 1.70 / 1.07 / 0.49; this
// model 1.61 / 1.07 / 0.53 against the true 1.61 / 1.075 / 0.54 relative to the pool's geometric
// mean). The attention term is left out: the rate feeds estimated-ttft-scorer's queues, which are
// linear in tokens. Endpoints with fewer than kMinLightSamples light samples get NaN.
// EndpointModel::busy_rate_tps from an endpoint's samples, oldest first.
double BusyRate(const std::vector<Sample>& samples) {
  double work = 0, seconds = 0;
  size_t n = 0;
  for (auto it = samples.rbegin(); it != samples.rend() && n < kBusySamples; ++it) {
    if (!std::isfinite(it->ttft)) continue;
    work += static_cast<double>(it->inflight_prefill) + std::max(1.0, static_cast<double>(it->input - it->hit));
    seconds += static_cast<double>(it->ttft);
    ++n;
  }
  return n >= kMinLightSamples && seconds > 0 ? work / seconds : std::numeric_limits<double>::quiet_NaN();
}

struct LightFit {
  std::vector<double> speed, rate_tps;
};
constexpr double kLightOutlier = 3;  // a light sample off its endpoint's median scale by more is left out
LightFit FitLightSpeeds(const std::vector<std::vector<Sample>>& light) {
  const size_t endpoints = light.size();
  LightFit out;
  out.speed.assign(endpoints, std::numeric_limits<double>::quiet_NaN());
  out.rate_tps.assign(endpoints, std::numeric_limits<double>::quiet_NaN());
  struct Point {
    double u, r, y, w;  // uncached tokens, the running batch, TTFT, weight
  };
  std::vector<std::vector<Point>> points(endpoints);
  for (size_t i = 0; i < endpoints; ++i) {
    if (light[i].size() < kMinLightSamples) continue;
    for (const Sample& smp : light[i]) {
      const DesignRow x = Design(FromSample(smp));
      points[i].push_back({x[0], x[4], smp.ttft, 1.0 / (static_cast<double>(smp.ttft) * smp.ttft)});
    }
  }
  std::vector<double> b(endpoints, 0.0), scale;
  double c = 0, g = 0;
  for (int round = 0; round < 100; ++round) {
    for (size_t i = 0; i < endpoints; ++i) {
      scale.clear();
      for (const Point& p : points[i]) {
        const double h = c + p.u + g * p.r;
        if (h > 0) scale.push_back(p.y / h);
      }
      b[i] = 0;
      if (scale.empty()) continue;
      auto mid = scale.begin() + static_cast<std::ptrdiff_t>(scale.size() / 2);
      std::nth_element(scale.begin(), mid, scale.end());
      const double median = *mid;
      double num = 0, den = 0;
      for (const Point& p : points[i]) {
        const double h = c + p.u + g * p.r;
        if (!(h > 0) || p.y < median * h / kLightOutlier || p.y > median * h * kLightOutlier) continue;
        num += p.w * h * p.y;
        den += p.w * h * h;
      }
      b[i] = den > 0 ? num / den : median;
    }
    // c + g * r = y / b_i - u, weighted by w * b_i^2 (the same residuals in seconds).
    double s0 = 0, s1 = 0, s11 = 0, sz = 0, s1z = 0;
    for (size_t i = 0; i < endpoints; ++i) {
      if (!(b[i] > 0)) continue;
      for (const Point& p : points[i]) {
        const double w = p.w * b[i] * b[i], z = p.y / b[i] - p.u;
        s0 += w;
        s1 += w * p.r;
        s11 += w * p.r * p.r;
        sz += w * z;
        s1z += w * p.r * z;
      }
    }
    if (!(s0 > 0)) break;
    double nc = sz / s0, ng = 0;
    const double det = s0 * s11 - s1 * s1;
    if (det > 1e-9 * s0 * s11) {
      nc = (s11 * sz - s1 * s1z) / det;
      ng = (s0 * s1z - s1 * sz) / det;
    }
    if (ng < 0) {
      ng = 0;
      nc = sz / s0;
    }
    if (nc < 0) {
      nc = 0;
      ng = s11 > 0 ? std::max(0.0, s1z / s11) : 0;
    }
    const bool done = std::fabs(nc - c) <= 1e-6 * (1 + c) && std::fabs(ng - g) <= 1e-6 * (1 + g);
    c = nc;
    g = ng;
    if (done) break;
  }
  // Speeds relative to the pool's endpoints as they are now: the geometric mean of the b_i over
  // the endpoint's.
  double mean = 0;
  size_t known = 0;
  for (size_t i = 0; i < endpoints; ++i) {
    if (!(b[i] > 0)) continue;
    mean += std::log(b[i]);
    ++known;
  }
  if (known == 0) return out;
  mean /= static_cast<double>(known);
  for (size_t i = 0; i < endpoints; ++i) {
    if (!(b[i] > 0)) continue;
    out.speed[i] = std::exp(std::clamp(mean - std::log(b[i]), -3.0, 3.0));
    out.rate_tps[i] = 1.0 / b[i];
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LatencyPredictor>> LatencyPredictor::Create(const LatencyPredictorOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  return std::unique_ptr<LatencyPredictor>(new LatencyPredictor(options));
}

namespace {
std::atomic<uint64_t> next_predictor_id{1};

// One thread's view of the last predictor it read: which predictor, which version, the snapshot.
struct ThreadCache {
  uint64_t owner = 0;
  uint64_t version = 0;
  std::shared_ptr<const LatencySnapshot> snapshot;
};
thread_local ThreadCache thread_cache;
}  // namespace

LatencyPredictor::LatencyPredictor(const LatencyPredictorOptions& options)
    : options_(options),
      id_(next_predictor_id.fetch_add(1, std::memory_order_relaxed)),
      snapshot_(std::make_shared<const LatencySnapshot>()) {}

std::shared_ptr<const LatencySnapshot> LatencyPredictor::snapshot() const {
  std::lock_guard<std::mutex> lock(snapshot_mu_);
  return snapshot_;
}

const LatencySnapshot& LatencyPredictor::Current() const {
  ThreadCache& cache = thread_cache;
  if (cache.owner != id_ || cache.version != published_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(snapshot_mu_);
    cache.owner = id_;
    cache.version = published_.load(std::memory_order_relaxed);
    cache.snapshot = snapshot_;
  }
  return *cache.snapshot;
}

void LatencyPredictor::Publish(std::shared_ptr<const LatencySnapshot> snapshot) {
  const uint64_t version = snapshot->version();
  std::lock_guard<std::mutex> lock(snapshot_mu_);
  snapshot_ = std::move(snapshot);
  published_.store(version, std::memory_order_release);
}

LatencyPredictor::~LatencyPredictor() { Stop(); }

bool LatencyPredictor::Observe(std::string_view endpoint, const LatencyFeatures& f, double ttft_s, double tpot_s) {
  if (!(std::isfinite(ttft_s) && ttft_s > 0)) return false;
  return Add(endpoint, f, ttft_s, tpot_s);
}

bool LatencyPredictor::ObserveTpot(std::string_view endpoint, const LatencyFeatures& f, double tpot_s) {
  if (!(std::isfinite(tpot_s) && tpot_s > 0)) return false;
  return Add(endpoint, f, std::numeric_limits<double>::quiet_NaN(), tpot_s);
}

bool LatencyPredictor::Add(std::string_view endpoint, const LatencyFeatures& f, double ttft_s, double tpot_s) {
  if (!Usable(f.kv_cache_usage) || !Usable(f.waiting_requests) || !Usable(f.running_requests) ||
      !Usable(f.input_tokens) || !Usable(f.prefix_hit_tokens) || !Usable(f.inflight_requests) ||
      !Usable(f.inflight_prefill_tokens) || !Usable(f.encoder_input_size) || !Usable(f.encoder_matched_size))
    return false;
  if (!(std::isfinite(tpot_s) && tpot_s > 0)) tpot_s = std::numeric_limits<double>::quiet_NaN();
  const int64_t now = options_.clock->NowMicros();
  std::shared_ptr<Store> store;
  {
    std::lock_guard<std::mutex> lock(table_mu_);
    auto it = stores_.find(Key(endpoint));
    if (it == stores_.end()) {
      if (stores_.size() >= options_.max_endpoints) {
        // Full: the least recently observed endpoint makes room.
        auto oldest = stores_.begin();
        for (auto i = stores_.begin(); i != stores_.end(); ++i)
          if (i->second->last_us.load(std::memory_order_relaxed) < oldest->second->last_us.load(std::memory_order_relaxed))
            oldest = i;
        stores_.erase(oldest);
      }
      it = stores_.emplace(std::string(endpoint), std::make_shared<Store>(options_.samples_per_endpoint)).first;
    }
    store = it->second;
    store->last_us.store(now, std::memory_order_relaxed);
  }
  {
    std::lock_guard<std::mutex> lock(store->mu);
    const Sample s = ToSample(f, ttft_s, tpot_s);
    PushRing(store->ring, store->next, options_.samples_per_endpoint, s);
    if (std::isfinite(ttft_s) && IsLightlyLoaded(f)) PushRing(store->light, store->light_next, kLightSamplesPerEndpoint, s);
  }
  changes_.fetch_add(1, std::memory_order_release);
  return true;
}

void LatencyPredictor::Forget(std::string_view endpoint) {
  std::lock_guard<std::mutex> lock(table_mu_);
  if (stores_.erase(Key(endpoint)) > 0) changes_.fetch_add(1, std::memory_order_release);
}

size_t LatencyPredictor::endpoint_count() const {
  std::lock_guard<std::mutex> lock(table_mu_);
  return stores_.size();
}

size_t LatencyPredictor::sample_count(std::string_view endpoint) const {
  std::shared_ptr<Store> store;
  {
    std::lock_guard<std::mutex> lock(table_mu_);
    const auto it = stores_.find(Key(endpoint));
    if (it == stores_.end()) return 0;
    store = it->second;
  }
  std::lock_guard<std::mutex> lock(store->mu);
  return store->ring.size();
}

TrainStats LatencyPredictor::TrainNow() {
  std::lock_guard<std::mutex> train_lock(train_mu_);
  TrainStats stats;
  const int64_t now = options_.clock->NowMicros();
  const uint64_t changes = changes_.load(std::memory_order_acquire);

  // The endpoints, after dropping the idle ones, in name order (a deterministic order for the
  // pool sample and the fits).
  std::vector<std::pair<std::string, std::shared_ptr<Store>>> stores;
  {
    std::lock_guard<std::mutex> lock(table_mu_);
    for (auto it = stores_.begin(); it != stores_.end();) {
      if (now - it->second->last_us.load(std::memory_order_relaxed) > options_.idle_evict_us) {
        stores_.erase(it++);
        ++stats.evicted;
      } else {
        stores.emplace_back(it->first, it->second);
        ++it;
      }
    }
  }
  std::sort(stores.begin(), stores.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  stats.endpoints = stores.size();
  if (changes == trained_changes_ && stats.evicted == 0) return stats;
  trained_changes_ = changes;
  ++rounds_;

  // Copy each ring under its own lock (a short hold: Observe waits for one ring copy at most).
  std::vector<std::vector<Sample>> samples(stores.size()), light(stores.size());
  for (size_t i = 0; i < stores.size(); ++i) {
    std::lock_guard<std::mutex> lock(stores[i].second->mu);
    samples[i] = stores[i].second->Chronological();
    light[i] = stores[i].second->light;
    stats.samples += samples[i].size();
  }

  // The pool's training set: every sample, or a seeded sample of max_pool_samples.
  std::vector<Sample> pool;
  pool.reserve(stats.samples);
  for (const auto& s : samples) pool.insert(pool.end(), s.begin(), s.end());
  if (pool.size() > options_.max_pool_samples) {
    uint64_t state = options_.seed ^ (rounds_ * 0xD1B54A32D192ED03ull);
    for (size_t i = 0; i < options_.max_pool_samples; ++i) {  // partial Fisher-Yates
      const size_t j = i + static_cast<size_t>(SplitMix(state) % (pool.size() - i));
      std::swap(pool[i], pool[j]);
    }
    pool.resize(options_.max_pool_samples);
  }
  stats.pool_samples = pool.size();

  auto snapshot = std::make_shared<LatencySnapshot>();
  snapshot->version_ = rounds_;
  Scaling scaling[2];
  DesignRow pool_beta[2] = {};
  std::vector<Row> rows;
  for (int target = 0; target < 2; ++target) {
    rows.clear();
    AppendRows(pool, target == 1, rows);
    if (rows.size() < 2) continue;
    scaling[target] = ScaleOf(rows);
    const StdFit fit = Solve(rows, scaling[target], DesignRow{}, options_.ridge_lambda);
    pool_beta[target] = fit.beta;
    (target == 0 ? snapshot->pool_.ttft : snapshot->pool_.tpot) = ToRaw(fit, scaling[target], rows, options_.quantile);
  }
  snapshot->pool_.from_prior = true;
  const LightFit light_fit = FitLightSpeeds(light);

  // An endpoint with fewer samples than its own model needs is the pool model scaled to its speed:
  // the geometric mean of observed/pool-predicted over its samples, shrunk toward 1 as if one more
  // sample had said 1 (so one sample moves it part of the way, ten nearly all). Its upper estimate
  // uses the pool's ratios after each endpoint's own scaling (the noise within an endpoint, not
  // the spread of speeds across the pool, which the raw pool model's quantile also holds: one slow
  // server made every new endpoint look slow).
  std::vector<double> partial_scale[2];
  double partial_upper[2] = {1, 1};
  for (int target = 0; target < 2; ++target) {
    const LinearFit& prior = target == 0 ? snapshot->pool_.ttft : snapshot->pool_.tpot;
    partial_scale[target].assign(stores.size(), 1.0);
    if (prior.samples == 0) continue;
    std::vector<double> normalised;
    for (size_t i = 0; i < stores.size(); ++i) {
      rows.clear();
      AppendRows(samples[i], target == 1, rows);
      double log_sum = 0;
      for (const Row& row : rows) log_sum += std::log(row.y / prior.Eval(row.x));
      const double scale =
          std::clamp(std::exp(log_sum / (static_cast<double>(rows.size()) + 1.0)), 0.05, 20.0);
      partial_scale[target][i] = scale;
      for (const Row& row : rows) normalised.push_back(row.y / (scale * prior.Eval(row.x)));
    }
    if (!normalised.empty()) {
      const size_t k = std::min(normalised.size() - 1,
                                static_cast<size_t>(options_.quantile * static_cast<double>(normalised.size())));
      std::nth_element(normalised.begin(), normalised.begin() + static_cast<std::ptrdiff_t>(k), normalised.end());
      partial_upper[target] = std::max(1.0, normalised[k]);
    }
  }

  // Each endpoint with enough TTFT samples gets its own model, shrunk toward the pool's; its
  // TPOT model is the pool's until it has enough TPOT samples of its own.
  for (size_t i = 0; i < stores.size() && snapshot->pool_.ttft.samples > 0; ++i) {
    EndpointModel m;
    bool partial = false;
    for (int target = 0; target < 2; ++target) {
      rows.clear();
      AppendRows(samples[i], target == 1, rows);
      const LinearFit& prior = target == 0 ? snapshot->pool_.ttft : snapshot->pool_.tpot;
      LinearFit& out = target == 0 ? m.ttft : m.tpot;
      if (rows.size() < options_.min_endpoint_samples || prior.samples == 0) {
        out = prior;
        if (!rows.empty() && prior.samples > 0) {
          const double scale = partial_scale[target][i];
          out.intercept *= scale;
          for (double& w : out.weights) w *= scale;
          out.floor_s *= scale;
          out.upper_scale = partial_upper[target];
          if (target == 0) partial = true;
        }
        continue;
      }
      // The prior is the pool's model scaled to this endpoint's speed: the factor s that fits
      // y ~ s * pool(x) best in relative terms (one parameter, learnt from few samples), so an
      // endpoint that is uniformly slower starts from the right level and its own slopes only
      // have to correct the shape.
      double num = 0, den = 0;
      for (const Row& row : rows) {
        const double q = prior.Eval(row.x) / row.y;
        num += q;
        den += q * q;
      }
      const double scale = den > 0 ? std::clamp(num / den, 0.05, 20.0) : 1.0;
      DesignRow prior_beta = pool_beta[target];
      for (double& b : prior_beta) b *= scale;
      const StdFit fit = Solve(rows, scaling[target], prior_beta, options_.prior_strength);
      out = ToRaw(fit, scaling[target], rows, options_.quantile);
    }
    m.light_speed = light_fit.speed[i];
    m.light_rate_tps = light_fit.rate_tps[i];
    m.busy_rate_tps = BusyRate(samples[i]);
    if (m.ttft.samples > 0 && samples[i].size() >= options_.min_endpoint_samples && !partial) {
      snapshot->models_.emplace(stores[i].first, std::move(m));
      ++stats.endpoint_models;
    } else if (partial) {
      m.from_prior = true;  // the pool's model, scaled to this endpoint's speed
      snapshot->models_.emplace(stores[i].first, std::move(m));
    }
  }
  Publish(std::move(snapshot));
  stats.published = true;
  return stats;
}

void LatencyPredictor::Loop() {
  std::unique_lock<std::mutex> lock(thread_mu_);
  while (!stop_) {
    thread_cv_.wait_for(lock, std::chrono::milliseconds(options_.train_interval_ms), [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    TrainNow();
    lock.lock();
  }
}

void LatencyPredictor::Start() {
  std::lock_guard<std::mutex> lock(thread_mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void LatencyPredictor::Stop() {
  std::thread t;
  {
    std::lock_guard<std::mutex> lock(thread_mu_);
    stop_ = true;
    t = std::move(thread_);
  }
  thread_cv_.notify_all();
  if (t.joinable()) t.join();
}

}  // namespace epp::latency
