#include "common/core/metrics.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace bm {
namespace {

void AppendNumber(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "NaN";
    return;
  }
  if (std::isinf(value)) {
    out += value > 0 ? "+Inf" : "-Inf";
    return;
  }
  char buffer[32];
  // Integers (counts, bytes) print exactly up to 2^53; the rest as the shortest text that reads
  // back as the same double (0.0025, not 0.0025000000000000001).
  if (value == std::floor(value) && std::fabs(value) < 9.007199254740992e15) {
    std::snprintf(buffer, sizeof(buffer), "%.0f", value);
    out += buffer;
    return;
  }
  const bool plain = std::fabs(value) > 1e-9 && std::fabs(value) < 1e15;
  auto [end, error] =
      plain ? std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::fixed)
            : std::to_chars(buffer, buffer + sizeof(buffer), value);
  out.append(buffer, error == std::errc() ? end : buffer);
}

void AppendEscaped(std::string& out, std::string_view value) {
  for (char c : value) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
}

}  // namespace

void LatencyHistogram::Observe(Duration elapsed) {
  const double seconds = std::chrono::duration<double>(elapsed).count();
  size_t bucket = 0;
  while (bucket < kBucketSeconds.size() && seconds > kBucketSeconds[bucket]) ++bucket;
  ++counts_[bucket];
  ++count_;
  sum_seconds_ += seconds;
}

void PrometheusText::Family(std::string_view name, Type type, std::string_view help) {
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  for (char c : help) out_ += c == '\n' ? ' ' : c;
  out_ += "\n# TYPE ";
  out_ += name;
  switch (type) {
    case Type::kCounter:
      out_ += " counter\n";
      break;
    case Type::kGauge:
      out_ += " gauge\n";
      break;
    case Type::kHistogram:
      out_ += " histogram\n";
      break;
  }
}

void PrometheusText::WriteLabels(const MetricLabels& labels, const char* extra_name,
                                 std::string_view extra_value) {
  if (labels.empty() && extra_name == nullptr) return;
  out_ += '{';
  bool first = true;
  auto write = [&](std::string_view name, std::string_view value) {
    if (!first) out_ += ',';
    first = false;
    out_ += name;
    out_ += "=\"";
    AppendEscaped(out_, value);
    out_ += '"';
  };
  for (const auto& [name, value] : labels) write(name, value);
  if (extra_name != nullptr) write(extra_name, extra_value);
  out_ += '}';
}

void PrometheusText::Sample(std::string_view name, const MetricLabels& labels, double value) {
  out_ += name;
  WriteLabels(labels);
  out_ += ' ';
  AppendNumber(out_, value);
  out_ += '\n';
}

void PrometheusText::Histogram(std::string_view name, const MetricLabels& labels,
                               const LatencyHistogram& histogram) {
  const std::string bucket_name = std::string(name) + "_bucket";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= LatencyHistogram::kBucketSeconds.size(); ++i) {
    cumulative += histogram.counts()[i];
    std::string le;
    if (i < LatencyHistogram::kBucketSeconds.size()) {
      AppendNumber(le, LatencyHistogram::kBucketSeconds[i]);
    } else {
      le = "+Inf";
    }
    out_ += bucket_name;
    WriteLabels(labels, "le", le);
    out_ += ' ';
    AppendNumber(out_, static_cast<double>(cumulative));
    out_ += '\n';
  }
  Sample(std::string(name) + "_sum", labels, histogram.sum_seconds());
  Sample(std::string(name) + "_count", labels, static_cast<double>(histogram.count()));
}

}  // namespace bm
