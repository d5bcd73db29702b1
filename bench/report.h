#pragma once

// The benchmark's result: one row per (workload, metric, peer), printed as a table or JSON.

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace bm::bench {

// A figure as the table prints it (3 significant digits; "-" for none).
std::string FormatNumber(std::optional<double> value);

// Which way a metric improves, so a row knows whether its target is met.
enum class Better { kHigher, kLower };

// blockmgr's figure beside one peer's, measured in the same run. `peer_value` is empty when the
// peer could not be measured (then the row has no ratio); a peer named "target" carries the
// issue's absolute goal instead of a measurement.
struct Row {
  std::string workload;
  std::string metric;
  std::optional<double> blockmgr;
  std::string peer;
  std::optional<double> peer_value;
  // The ratio blockmgr / peer the issue asks for (at least this for kHigher, at most for kLower).
  std::optional<double> target_ratio;
  Better better = Better::kHigher;
  std::string note;

  std::optional<double> ratio() const;
  // Empty when there is no target or no ratio.
  std::optional<bool> met() const;
};

class Report {
 public:
  void Add(Row row) { rows_.push_back(std::move(row)); }
  // A note that applies to the whole run (how a workload was measured, what was skipped).
  void AddNote(std::string note) { notes_.push_back(std::move(note)); }
  const std::vector<Row>& rows() const { return rows_; }

  void PrintTable(std::ostream& out) const;
  // A list of rows {"workload", "metric", "blockmgr", "peer", "peer_value", "ratio",
  // "target_ratio", "better", "met", "note"}; unknown numbers are null.
  nlohmann::json ToJson() const;

 private:
  std::vector<Row> rows_;
  std::vector<std::string> notes_;
};

}  // namespace bm::bench
