#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "master/cluster_snapshot.h"

namespace bm {

// The master's web pages: server-rendered HTML with inline styles and no scripts or external
// assets (they work offline and behind any proxy), refreshing themselves every few seconds.
// Long lists are paginated, so no page grows with the number of blocks.
class StatusPages {
 public:
  static constexpr size_t kRowsPerPage = 100;
  static constexpr int kRefreshSeconds = 5;

  // Storage: one row per RDD, like Spark's Storage tab. `page` counts from 0.
  static std::string Storage(const ClusterSnapshot& snapshot, size_t page);
  // One RDD: its summary, its spread over workers and one page of its partitions.
  static std::string Rdd(const RddStatus& rdd,
                         const std::optional<std::vector<RddDistribution>>& distribution,
                         const BlockPage& partitions, const std::string& cursor);
  static std::string Workers(const ClusterSnapshot& snapshot);
  static std::string Health(const ClusterSnapshot& snapshot);
  // A page saying what is missing (unknown RDD, loop not answering) with the right title.
  static std::string Message(const std::string& title, const std::string& text);
};

// Escapes text for HTML element content and attribute values.
std::string HtmlEscape(std::string_view text);

}  // namespace bm
