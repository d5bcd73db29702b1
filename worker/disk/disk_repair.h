#pragma once

#include <string>
#include <vector>

#include "blockmgr/status.h"

namespace rocksdb {
struct Options;
class Status;
}  // namespace rocksdb

namespace bm::disk {

// Whether a failed open of a disk store's database is one a repair can get past: RocksDB could
// not use one of its table files (cut short, an unreadable footer or properties block, a size
// other than the MANIFEST's), or met other corruption while opening. Its whole store is not lost
// then, only what the files set aside held.
bool IsUnreadableTableError(const rocksdb::Status& open_error);

// Rebuilds the database's MANIFEST from the files in `dir` (RocksDB's RepairDB): table files it
// cannot read are set aside in `dir`/lost/, the others kept with their sequence numbers (newer
// versions still shadow older ones), and the write-ahead log turned into tables. Returns the
// table files set aside ("000012.sst"), for the log and the lost blocks' reason. The blocks
// whose records they held are then missing from the store, which the commit journal check
// names as lost (journal_check.h). Runs on the storage thread, before the database is opened.
Result<std::vector<std::string>> RepairUnreadableTables(const std::string& dir,
                                                        const rocksdb::Options& options);

}  // namespace bm::disk
