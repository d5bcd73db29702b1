#include "bench/report.h"

#include <algorithm>
#include <cstdio>
#include <ostream>

namespace bm::bench {
std::string FormatNumber(std::optional<double> value) {
  if (!value) return "-";
  char buf[64];
  const double v = *value;
  if (v != 0 && (v >= 1e6 || v < 0.01)) {
    std::snprintf(buf, sizeof(buf), "%.3g", v);
  } else if (v >= 1000) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.3g", v);
  }
  return buf;
}

namespace {

std::string FormatTarget(const Row& row) {
  if (!row.target_ratio) return "";
  return (row.better == Better::kHigher ? ">= " : "<= ") + FormatNumber(row.target_ratio);
}

nlohmann::json OrNull(std::optional<double> value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

}  // namespace

std::optional<double> Row::ratio() const {
  if (!blockmgr || !peer_value || *peer_value == 0) return std::nullopt;
  return *blockmgr / *peer_value;
}

std::optional<bool> Row::met() const {
  std::optional<double> r = ratio();
  if (!r || !target_ratio) return std::nullopt;
  return better == Better::kHigher ? *r >= *target_ratio : *r <= *target_ratio;
}

void Report::PrintTable(std::ostream& out) const {
  const std::vector<std::string> header = {"workload",   "metric", "blockmgr", "peer",
                                           "peer value", "ratio",  "target",   "met"};
  std::vector<std::vector<std::string>> cells;
  for (const Row& row : rows_) {
    std::optional<bool> met = row.met();
    cells.push_back({row.workload, row.metric, FormatNumber(row.blockmgr), row.peer,
                     FormatNumber(row.peer_value), FormatNumber(row.ratio()), FormatTarget(row),
                     met ? (*met ? "yes" : "NO") : ""});
  }
  std::vector<size_t> widths(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    widths[c] = header[c].size();
    for (const auto& line : cells) widths[c] = std::max(widths[c], line[c].size());
  }
  auto print_line = [&](const std::vector<std::string>& line) {
    out << "|";
    for (size_t c = 0; c < line.size(); ++c) {
      out << " " << line[c] << std::string(widths[c] - line[c].size(), ' ') << " |";
    }
    out << "\n";
  };
  print_line(header);
  out << "|";
  for (size_t width : widths) out << std::string(width + 2, '-') << "|";
  out << "\n";
  for (const auto& line : cells) print_line(line);
  bool any_row_note =
      std::any_of(rows_.begin(), rows_.end(), [](const Row& row) { return !row.note.empty(); });
  if (any_row_note || !notes_.empty()) out << "\nNotes:\n";
  for (const Row& row : rows_) {
    if (!row.note.empty())
      out << "- " << row.workload << " / " << row.peer << ": " << row.note << "\n";
  }
  for (const std::string& note : notes_) out << "- " << note << "\n";
}

nlohmann::json Report::ToJson() const {
  nlohmann::json rows = nlohmann::json::array();
  for (const Row& row : rows_) {
    std::optional<bool> met = row.met();
    rows.push_back({{"workload", row.workload},
                    {"metric", row.metric},
                    {"blockmgr", OrNull(row.blockmgr)},
                    {"peer", row.peer},
                    {"peer_value", OrNull(row.peer_value)},
                    {"ratio", OrNull(row.ratio())},
                    {"target_ratio", OrNull(row.target_ratio)},
                    {"better", row.better == Better::kHigher ? "higher" : "lower"},
                    {"met", met ? nlohmann::json(*met) : nlohmann::json(nullptr)},
                    {"note", row.note}});
  }
  return rows;
}

}  // namespace bm::bench
