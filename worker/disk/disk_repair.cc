#include "worker/disk/disk_repair.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>

namespace bm::disk {
namespace {

// The table files in RocksDB's lost/ folder (where RepairDB archives what it cannot use).
std::set<std::string> LostTables(const std::filesystem::path& lost) {
  std::set<std::string> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(lost, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".sst") out.insert(it->path().filename().string());
  }
  return out;
}

}  // namespace

bool IsUnreadableTableError(const rocksdb::Status& open_error) {
  if (!open_error.IsCorruption() && !open_error.IsIOError()) return false;
  if (open_error.IsNoSpace()) return false;
  const std::string text = open_error.ToString();
  if (text.find("/LOCK") != std::string::npos) return false;
  // A table whose properties block is damaged is reported against the MANIFEST that lists it
  // ("Corruption: properties unsorted in file .../MANIFEST-000010"): any corruption met while
  // opening is one the repair can get past (a damaged write-ahead log is not one: RocksDB
  // recovers it up to its first bad record without an error).
  if (open_error.IsCorruption()) return true;
  // "While open a file for random read: .../000012.sst: ...".
  return text.find(".sst") != std::string::npos;
}

Result<std::vector<std::string>> RepairUnreadableTables(const std::string& dir,
                                                        const rocksdb::Options& options) {
  const std::filesystem::path lost = std::filesystem::path(dir) / "lost";
  const std::set<std::string> before = LostTables(lost);
  rocksdb::Status repaired = rocksdb::RepairDB(dir, options);
  if (!repaired.ok()) {
    return InternalError(
        "disk store " + dir +
        ": repairing past an unreadable table file failed: " + repaired.ToString());
  }
  std::vector<std::string> set_aside;
  for (const std::string& name : LostTables(lost)) {
    if (!before.contains(name)) set_aside.push_back(name);
  }
  return set_aside;
}

}  // namespace bm::disk
