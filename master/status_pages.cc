#include "master/status_pages.h"

#include <algorithm>
#include <chrono>
#include <ctime>

#include "common/core/byte_size.h"
#include "common/core/utc_time.h"

namespace bm {
namespace {

constexpr const char* kStyle = R"(
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:0;color:#222;
  background:#fafafa;font-size:14px}
header{background:#1f3a5f;color:#fff;padding:10px 24px;display:flex;align-items:center;gap:24px}
header b{font-size:18px}
header a{color:#cfe0f5;text-decoration:none;font-weight:600}
header a.on{color:#fff;border-bottom:2px solid #fff}
main{padding:16px 24px}
h1{font-size:20px;margin:8px 0 12px}
h2{font-size:16px;margin:20px 0 8px}
table{border-collapse:collapse;background:#fff;width:100%;margin-bottom:8px}
th,td{border:1px solid #ddd;padding:5px 8px;text-align:left;vertical-align:middle}
th{background:#eef2f7}
tr:nth-child(even) td{background:#f8f9fb}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.bar{position:relative;background:#e3e7ec;border-radius:3px;height:18px;min-width:140px}
.bar>span{position:absolute;left:0;top:0;bottom:0;background:#4c9a2a;border-radius:3px}
.bar>em{position:relative;font-style:normal;font-size:12px;padding-left:6px;line-height:18px}
.warn{color:#b35900;font-weight:600}
.muted{color:#777}
.pager a{margin-right:12px}
dl{display:grid;grid-template-columns:max-content auto;gap:4px 16px}
dt{font-weight:600}
)";

std::string Head(const std::string& title, const std::string& active) {
  std::string out = "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">";
  out += "<meta http-equiv=\"refresh\" content=\"" + std::to_string(StatusPages::kRefreshSeconds) +
         "\">";
  out += "<title>" + HtmlEscape(title) + " - blockmgr</title><style>" + kStyle +
         "</style></head><body><header><b>blockmgr</b>";
  for (const auto& [href, name] : {std::pair<const char*, const char*>{"/storage", "Storage"},
                                   {"/workers", "Workers"},
                                   {"/health", "Health"}}) {
    out += std::string("<a href=\"") + href + "\"" + (active == name ? " class=\"on\"" : "") + ">" +
           name + "</a>";
  }
  out += "</header><main><h1>" + HtmlEscape(title) + "</h1>";
  return out;
}

std::string Tail(int64_t taken_unix_ms) {
  std::string out = "<p class=\"muted\">";
  if (taken_unix_ms > 0) {
    out += "State as of " + FormatUtcTime(static_cast<uint64_t>(taken_unix_ms)) + "; ";
  }
  out += "this page refreshes every " + std::to_string(StatusPages::kRefreshSeconds) +
         " s.</p></main></body></html>";
  return out;
}

// A horizontal bar filled to used/total with a label on it.
std::string Bar(uint64_t used, uint64_t total, const std::string& label) {
  const double fraction =
      total == 0 ? 0.0 : std::min(1.0, static_cast<double>(used) / static_cast<double>(total));
  char width[16];
  std::snprintf(width, sizeof(width), "%.1f%%", fraction * 100);
  return std::string("<div class=\"bar\"><span style=\"width:") + width + "\"></span><em>" +
         HtmlEscape(label) + "</em></div>";
}

std::string Percent(uint64_t part, uint64_t whole) {
  if (whole == 0) return "?";
  char text[16];
  std::snprintf(text, sizeof(text), "%.0f%%", 100.0 * static_cast<double>(part) / whole);
  return text;
}

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& part : parts) out += (out.empty() ? "" : ", ") + HtmlEscape(part);
  return out;
}

std::string Num(uint64_t value) { return "<td class=\"num\">" + std::to_string(value) + "</td>"; }
std::string Bytes(uint64_t value) { return "<td class=\"num\">" + FormatBytes(value) + "</td>"; }

std::string AgeText(uint64_t ms) {
  if (ms < 1000) return std::to_string(ms) + " ms ago";
  if (ms < 120000) return std::to_string(ms / 1000) + " s ago";
  return std::to_string(ms / 60000) + " min ago";
}

std::string RddName(const RddStatus& rdd) {
  return rdd.name.empty() ? "<span class=\"muted\">(unnamed)</span>" : HtmlEscape(rdd.name);
}

std::string CachedCell(const RddStatus& rdd) {
  // Unregistered RDDs have no known total: show the cached count alone.
  if (rdd.total_partitions == 0) {
    return "<td>" + std::to_string(rdd.cached_partitions) + " cached</td>";
  }
  return "<td>" +
         Bar(rdd.cached_partitions, rdd.total_partitions,
             std::to_string(rdd.cached_partitions) + " / " + std::to_string(rdd.total_partitions)) +
         "</td>";
}

}  // namespace

std::string HtmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

// Every worker's disks (--disk-dir): used against capacity, state, and why a failed one failed.
std::string DisksTable(const ClusterSnapshot& snapshot) {
  std::string out =
      "<h2>Disks</h2><table><tr><th>Worker</th><th>Disk</th><th>State</th><th>Used</th>"
      "<th>Limit</th><th>Reason</th></tr>";
  size_t rows = 0;
  for (const WorkerStatus& worker : snapshot.workers) {
    for (const DiskStats& disk : worker.stats.disks) {
      ++rows;
      const bool bad = disk.state != DiskState::kOk;
      out += "<tr><td>" + HtmlEscape(worker.id) + "</td><td>" + HtmlEscape(disk.path) + "</td><td" +
             (bad ? " class=\"warn\"" : "") + ">" + DiskStateName(disk.state) + "</td><td>" +
             Bar(disk.used, disk.capacity,
                 FormatBytes(disk.used) + " / " + FormatBytes(disk.capacity)) +
             "</td><td class=\"num\">" +
             (disk.limit == 0 ? std::string("-") : FormatBytes(disk.limit)) + "</td><td>" +
             HtmlEscape(disk.reason.empty() ? std::string("-") : disk.reason) + "</td></tr>";
    }
  }
  if (rows == 0) {
    out += "<tr><td colspan=\"6\" class=\"muted\">No worker reports its disks.</td></tr>";
  }
  return out + "</table>";
}

// The newest blocks whose last copy was lost (HDFS's fsck lists missing blocks).
std::string LostBlocksSection(const ClusterSnapshot& snapshot) {
  std::string out = "<h2>Lost blocks</h2><p>" + std::to_string(snapshot.lost_count) +
                    " blocks lost their last copy (the newest " +
                    std::to_string(snapshot.recent_lost.size()) +
                    " below; all: <code>bmctl blocks --lost</code>, "
                    "<a href=\"/api/v1/blocks?state=lost\">/api/v1/blocks?state=lost</a>).</p>";
  if (snapshot.recent_lost.empty()) return out;
  out +=
      "<table><tr><th>Block</th><th>Storage Level</th><th>Size</th><th>Lost at</th>"
      "<th>Reason</th><th>Worker</th><th>Detail</th></tr>";
  for (auto it = snapshot.recent_lost.rbegin(); it != snapshot.recent_lost.rend(); ++it) {
    out += "<tr><td>" + HtmlEscape(it->id.ToString()) + "</td><td>" +
           HtmlEscape(StorageLevelName(it->level)) + "</td>" + Bytes(it->size) + "<td>" +
           FormatUtcTime(it->lost_at_ms) + "</td><td class=\"warn\">" +
           HtmlEscape(LostCauseName(it->cause)) + "</td><td>" + HtmlEscape(it->worker_id) +
           "</td><td>" + HtmlEscape(it->detail) + "</td></tr>";
  }
  return out + "</table>";
}

// The registered shuffles (README "Shuffles"): shape, level, committed maps and bytes.
std::string ShufflesSection(const ClusterSnapshot& snapshot) {
  std::string out =
      "<h2>Shuffles</h2><table><tr><th>ID</th><th>Maps</th><th>Partitions</th>"
      "<th>Storage Level</th><th>Committed Maps</th><th>Committed Bytes</th><th>Workers</th>"
      "<th>Idle</th></tr>";
  for (const ShuffleStatus& shuffle : snapshot.shuffles) {
    out += "<tr><td>" + std::to_string(shuffle.id) + "</td><td class=\"num\">" +
           std::to_string(shuffle.maps) + "</td><td class=\"num\">" +
           std::to_string(shuffle.partitions) + "</td><td>" +
           HtmlEscape(StorageLevelName(shuffle.level)) + "</td><td class=\"num\">" +
           std::to_string(shuffle.committed_maps) + "</td>" + Bytes(shuffle.bytes) + "<td>" +
           std::to_string(shuffle.workers.size()) + "</td><td class=\"num\">" +
           std::to_string(shuffle.idle_ms / 1000) + " s</td></tr>";
  }
  if (snapshot.shuffles.empty()) {
    out += "<tr><td colspan=\"8\" class=\"muted\">No shuffles are registered.</td></tr>";
  }
  return out + "</table>";
}

}  // namespace

std::string StatusPages::Storage(const ClusterSnapshot& snapshot, size_t page) {
  std::string out = Head("Storage", "Storage");
  uint64_t memory = 0, disk = 0;
  for (const RddStatus& rdd : snapshot.rdds) {
    memory += rdd.memory_bytes;
    disk += rdd.disk_bytes;
  }
  out += "<p>" + std::to_string(snapshot.rdds.size()) +
         (snapshot.rdds.size() == 1 ? " RDD, " : " RDDs, ") + std::to_string(snapshot.block_count) +
         " blocks, " + FormatBytes(memory) + " in memory, " + FormatBytes(disk) + " on disk, " +
         std::to_string(snapshot.workers.size()) + " workers.</p>";
  out +=
      "<table><tr><th>ID</th><th>RDD Name</th><th>Storage Level</th><th>Cached Partitions</th>"
      "<th>Fraction Cached</th><th>Size in Memory</th><th>Size on Disk</th><th>Workers</th></tr>";
  const size_t first = std::min(page * kRowsPerPage, snapshot.rdds.size());
  const size_t last = std::min(first + kRowsPerPage, snapshot.rdds.size());
  for (size_t i = first; i < last; ++i) {
    const RddStatus& rdd = snapshot.rdds[i];
    const std::string link = "<a href=\"/rdd/" + std::to_string(rdd.id) + "\">";
    out += "<tr><td>" + link + std::to_string(rdd.id) + "</a></td><td>" + link + RddName(rdd) +
           "</a></td><td>" + HtmlEscape(StorageLevelName(rdd.level)) + "</td>" + CachedCell(rdd) +
           "<td class=\"num\">" + Percent(rdd.cached_partitions, rdd.total_partitions) + "</td>" +
           Bytes(rdd.memory_bytes) + Bytes(rdd.disk_bytes) + "<td>" +
           std::to_string(rdd.workers.size()) + "</td></tr>";
  }
  if (snapshot.rdds.empty()) {
    out += "<tr><td colspan=\"8\" class=\"muted\">No RDDs are cached.</td></tr>";
  }
  out += "</table><p class=\"pager\">";
  if (page > 0)
    out += "<a href=\"/storage?page=" + std::to_string(page - 1) + "\">&larr; Previous</a>";
  if (last < snapshot.rdds.size()) {
    out += "<a href=\"/storage?page=" + std::to_string(page + 1) + "\">Next &rarr;</a>";
  }
  out += "</p>";
  out += ShufflesSection(snapshot);
  out += DisksTable(snapshot);
  out += LostBlocksSection(snapshot);
  return out + Tail(snapshot.taken_unix_ms);
}

std::string StatusPages::Rdd(const RddStatus& rdd,
                             const std::optional<std::vector<RddDistribution>>& distribution,
                             const BlockPage& partitions, const std::string& cursor) {
  std::string out =
      Head("RDD " + std::to_string(rdd.id) + (rdd.name.empty() ? "" : ": " + rdd.name), "Storage");
  out += "<dl><dt>Storage Level</dt><dd>" + HtmlEscape(StorageLevelName(rdd.level)) +
         "</dd><dt>Cached Partitions</dt><dd>" + std::to_string(rdd.cached_partitions) +
         (rdd.total_partitions ? " / " + std::to_string(rdd.total_partitions) + " (" +
                                     Percent(rdd.cached_partitions, rdd.total_partitions) + ")"
                               : std::string()) +
         "</dd><dt>Size in Memory</dt><dd>" + FormatBytes(rdd.memory_bytes) +
         "</dd><dt>Size on Disk</dt><dd>" + FormatBytes(rdd.disk_bytes) + "</dd></dl>";

  if (distribution) {
    out += "<h2>Data Distribution on " + std::to_string(distribution->size()) +
           " Workers</h2><table><tr><th>Worker</th><th>Address</th><th>Blocks</th>"
           "<th>Memory Usage</th><th>Memory Remaining</th><th>Disk Usage</th></tr>";
    for (const RddDistribution& entry : *distribution) {
      out += "<tr><td>" + HtmlEscape(entry.worker_id) + "</td><td>" + HtmlEscape(entry.address) +
             "</td>" + Num(entry.blocks) + Bytes(entry.memory_bytes) +
             Bytes(entry.memory_remaining) + Bytes(entry.disk_bytes) + "</tr>";
    }
    out += "</table>";
  } else {
    out +=
        "<h2>Data Distribution</h2><p class=\"muted\">This RDD has too many cached blocks to "
        "sum up per worker on request; see each worker's /metrics.</p>";
  }

  out +=
      "<h2>Partitions</h2><table><tr><th>Block Name</th><th>Storage Level</th><th>Size</th>"
      "<th>Tier</th><th>Copies</th><th>Locations</th></tr>";
  for (const BlockRow& row : partitions.rows) {
    uint64_t size = 0;
    std::vector<std::string> tiers, where;
    for (const BlockCopy& copy : row.copies) {
      size = std::max(size, copy.size);
      tiers.emplace_back(TierName(copy.tier));
      where.push_back(copy.worker_id);
    }
    std::sort(tiers.begin(), tiers.end());
    tiers.erase(std::unique(tiers.begin(), tiers.end()), tiers.end());
    const int wanted = ReplicationOf(row.level);
    const bool short_of_copies = row.copies.size() < static_cast<size_t>(wanted);
    out += "<tr><td>" + HtmlEscape(row.id.ToString()) + "</td><td>" +
           HtmlEscape(StorageLevelName(row.level)) + "</td>" + Bytes(size) + "<td>" + Join(tiers) +
           "</td><td class=\"num" + (short_of_copies ? " warn" : "") + "\">" +
           std::to_string(row.copies.size()) + " / " + std::to_string(wanted) + "</td><td>" +
           Join(where) + "</td></tr>";
  }
  out += "</table><p class=\"pager\">";
  if (!cursor.empty()) out += "<a href=\"/rdd/" + std::to_string(rdd.id) + "\">&larr; First</a>";
  if (partitions.next_cursor) {
    out += "<a href=\"/rdd/" + std::to_string(rdd.id) +
           "?cursor=" + HtmlEscape(partitions.next_cursor->ToString()) + "\">Next &rarr;</a>";
  }
  out += "</p>";
  return out + Tail(0);
}

std::string StatusPages::Workers(const ClusterSnapshot& snapshot) {
  std::string out = Head("Workers", "Workers");
  out +=
      "<table><tr><th>ID</th><th>Address</th><th>Host / Rack</th><th>State</th>"
      "<th>Memory</th><th>Disk</th><th>Blocks</th><th>Last Heartbeat</th></tr>";
  for (const WorkerStatus& worker : snapshot.workers) {
    const std::string placement = (worker.host.empty() ? std::string("-") : worker.host) + " / " +
                                  (worker.rack.empty() ? std::string("-") : worker.rack);
    const std::string disk_label =
        FormatBytes(worker.stats.disk_used) + " / " +
        (worker.stats.disk_capacity ? FormatBytes(worker.stats.disk_capacity) : "unlimited");
    out += "<tr><td>" + HtmlEscape(worker.id) + "</td><td>" + HtmlEscape(worker.address) +
           "</td><td>" + HtmlEscape(placement) + "</td><td" +
           (worker.state == WorkerState::kActive ? "" : " class=\"warn\"") + ">" +
           HtmlEscape(std::string(WorkerStateName(worker.state))) + "</td><td>" +
           Bar(worker.stats.memory_used, worker.stats.memory_capacity,
               FormatBytes(worker.stats.memory_used) + " / " +
                   FormatBytes(worker.stats.memory_capacity)) +
           "</td><td>" + Bar(worker.stats.disk_used, worker.stats.disk_capacity, disk_label) +
           "</td>" + Num(worker.stats.block_count) + "<td>" +
           AgeText(worker.last_heartbeat_age_ms) + "</td></tr>";
  }
  if (snapshot.workers.empty()) {
    out += "<tr><td colspan=\"8\" class=\"muted\">No workers are registered.</td></tr>";
  }
  out += "</table>";
  out += DisksTable(snapshot);
  return out + Tail(snapshot.taken_unix_ms);
}

std::string StatusPages::Health(const ClusterSnapshot& snapshot) {
  const MasterCounters& counters = snapshot.counters;
  std::string out = Head("Health", "Health");
  auto row = [](const std::string& name, const std::string& value, bool bad = false) {
    return "<tr><td>" + name + "</td><td class=\"num" + (bad ? " warn" : "") + "\">" + value +
           "</td></tr>";
  };
  out += "<table><tr><th>Check</th><th>Value</th></tr>";
  out += row("Blocks", std::to_string(snapshot.block_count));
  out += row("Under-replicated blocks", std::to_string(snapshot.under_replicated),
             snapshot.under_replicated > 0);
  out += row("Copies in flight", std::to_string(snapshot.copies_in_flight));
  out += row("Copies started (re-replication, drains)", std::to_string(counters.copies_started));
  out += row("Blocks lost with dropped workers", std::to_string(counters.blocks_lost),
             counters.blocks_lost > 0);
  out += row("Lost blocks kept (bmctl blocks --lost)", std::to_string(snapshot.lost_count),
             snapshot.lost_count > 0);
  out += row("Workers dropped (no heartbeat)", std::to_string(counters.workers_dropped),
             counters.workers_dropped > 0);
  out += row("Journal", snapshot.journaled ? "on" : "off (no --state-dir)");
  if (snapshot.role.elected) {
    out +=
        row("Role", snapshot.role.leader
                        ? "leader of epoch " + std::to_string(snapshot.role.epoch) + ", " +
                              std::to_string(snapshot.role.standbys_in_sync) + " standbys in sync"
                        : "standby (the leader is " + HtmlEscape(snapshot.role.leader_address) +
                              ", epoch " + std::to_string(snapshot.role.epoch) + ")");
  }
  out += row("Journal write failures", std::to_string(counters.journal_failures),
             counters.journal_failures > 0);
  out += row("Checksum failures", "<span class=\"muted\">not checked yet</span>");
  out += "</table>";

  out += "<h2>Decommissioning</h2><table><tr><th>Worker</th><th>Blocks left to move</th></tr>";
  bool any = false;
  for (const WorkerStatus& worker : snapshot.workers) {
    if (worker.state != WorkerState::kDecommissioning) continue;
    any = true;
    out += "<tr><td>" + HtmlEscape(worker.id) + "</td>" + Num(worker.locations) + "</tr>";
  }
  if (!any) out += "<tr><td colspan=\"2\" class=\"muted\">None.</td></tr>";
  out += "</table>";

  out +=
      "<h2>Recent Worker Joins and Drops</h2><table><tr><th>Time</th><th>Worker</th>"
      "<th>Event</th></tr>";
  for (auto it = counters.recent_events.rbegin(); it != counters.recent_events.rend(); ++it) {
    const std::time_t seconds = static_cast<std::time_t>(it->unix_ms / 1000);
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    char when[32];
    std::strftime(when, sizeof(when), "%H:%M:%S UTC", &utc);
    out += std::string("<tr><td>") + when + "</td><td>" + HtmlEscape(it->worker_id) + "</td><td>" +
           HtmlEscape(it->what) + "</td></tr>";
  }
  if (counters.recent_events.empty()) {
    out += "<tr><td colspan=\"3\" class=\"muted\">None since the master started.</td></tr>";
  }
  out += "</table>";
  return out + Tail(snapshot.taken_unix_ms);
}

std::string StatusPages::Message(const std::string& title, const std::string& text) {
  return Head(title, "") + "<p>" + HtmlEscape(text) + "</p>" + Tail(0);
}

}  // namespace bm
