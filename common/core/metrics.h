#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/core/clock.h"

namespace bm {

// Request latencies counted into fixed buckets (100 us .. 10 s). Plain integers: owned by the
// thread that observes (an event loop), and copied whole into a status snapshot for readers.
class LatencyHistogram {
 public:
  // Upper bounds in seconds, as Prometheus's `le` labels.
  static constexpr std::array<double, 14> kBucketSeconds = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 10};

  void Observe(Duration elapsed);

  // Observations at or below kBucketSeconds[i], not cumulative; the last slot counts the rest.
  const std::array<uint64_t, kBucketSeconds.size() + 1>& counts() const { return counts_; }
  uint64_t count() const { return count_; }
  double sum_seconds() const { return sum_seconds_; }

 private:
  std::array<uint64_t, kBucketSeconds.size() + 1> counts_{};
  uint64_t count_ = 0;
  double sum_seconds_ = 0;
};

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// Writes the Prometheus text exposition format (version 0.0.4). Each family is declared once
// with Family(), then its samples follow. Names use base units (`_bytes`, `_seconds`) and
// counters end in `_total`; callers keep block ids out of labels so series stay few.
//
// Not thread-safe; one writer per response.
class PrometheusText {
 public:
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

  enum class Type { kCounter, kGauge, kHistogram };

  void Family(std::string_view name, Type type, std::string_view help);
  void Sample(std::string_view name, const MetricLabels& labels, double value);
  void Sample(std::string_view name, double value) { Sample(name, {}, value); }
  // A family of one unlabelled sample: most of a server's counters and gauges.
  void Single(std::string_view name, Type type, std::string_view help, double value) {
    Family(name, type, help);
    Sample(name, value);
  }
  // The _bucket, _sum and _count series of a histogram family declared as `name`.
  void Histogram(std::string_view name, const MetricLabels& labels,
                 const LatencyHistogram& histogram);

  const std::string& text() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  void WriteLabels(const MetricLabels& labels, const char* extra_name = nullptr,
                   std::string_view extra_value = {});

  std::string out_;
};

}  // namespace bm
