// Writing Prometheus text exposition (format 0.0.4), private to libepp: the one writer behind
// `eppctl serve`'s /metrics and the simulator's engine dialects.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace epp::internal {

using Labels = std::vector<std::pair<std::string, std::string>>;

enum class NumberStyle {
  kShortest,  // shortest round-trip digits, %g layout: "3", "0.25", "1e-05" (our own servers)
  kPython,    // Python's float repr, as the engines print through prometheus_client: "3.0", "0.25"
};

std::string FormatNumber(double v, NumberStyle style);

class Exposition {
 public:
  // `common` labels follow each sample's own labels (vLLM writes `le` before `model_name`).
  explicit Exposition(NumberStyle style = NumberStyle::kShortest, Labels common = {})
      : style_(style), common_(std::move(common)) {}

  void Family(std::string_view name, std::string_view type, std::string_view help);
  void Sample(std::string_view name, const Labels& labels, double value) { Write(name, labels, Number(value), true); }
  void Sample(std::string_view name, const Labels& labels, int64_t value) {
    Write(name, labels, std::to_string(value), true);
  }
  // A sample without the common labels (an info gauge whose labels are the whole point).
  void SampleOwnLabels(std::string_view name, const Labels& labels, double value) {
    Write(name, labels, Number(value), false);
  }
  // A family with one sample and no labels of its own.
  template <typename T>
  void Single(std::string_view name, std::string_view type, std::string_view help, T value) {
    Family(name, type, help);
    Sample(name, {}, value);
  }
  // `name`_bucket / _sum / _count from cumulative counts aligned with `bounds` (+Inf = count).
  void Histogram(std::string_view name, const Labels& labels, std::span<const double> bounds,
                 std::span<const uint64_t> cumulative, uint64_t count, double sum);
  std::string Take() { return std::move(out_); }

 private:
  std::string Number(double v) const { return FormatNumber(v, style_); }
  void Write(std::string_view name, const Labels& labels, const std::string& value, bool with_common);

  NumberStyle style_;
  Labels common_;
  std::string out_;
};

}  // namespace epp::internal
