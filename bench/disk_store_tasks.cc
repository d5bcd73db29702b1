// The disk store by itself, in this process: plain RocksDB values against blob files for the
// same 1 MiB chunks (issue 5: "measure chunked plain values against blob files and keep the
// faster"). No network, so the figures are the store's own.

#include <filesystem>

#include "bench/tasks.h"
#include "worker/disk_store.h"

namespace bm::bench {
namespace {

Result<Json> MeasureFormat(const std::string& dir, DiskValueFormat format, uint64_t size,
                           int blocks, const Duration& duration) {
  std::filesystem::remove_all(dir);
  BM_ASSIGN_OR_RETURN(std::unique_ptr<DiskStore> store, DiskStore::Open(dir, 0, format));
  const std::vector<std::byte> data = PatternBytes(size);
  auto put = [&](int key) -> Status {
    BM_ASSIGN_OR_RETURN(std::unique_ptr<DiskWriter> writer,
                        store->BeginWrite(BlockId::Rdd(1, key), StorageLevel::kDiskOnly, size));
    BM_RETURN_IF_ERROR(writer->Append(data));
    return writer->Commit();
  };
  auto get = [&](int key) -> Status {
    BM_ASSIGN_OR_RETURN(DiskRead read, store->Read(BlockId::Rdd(1, key), 0, size));
    uint64_t bytes = 0;
    for (const ChunkPtr& chunk : read.chunks) bytes += chunk->size();
    return bytes == size ? Status::Ok() : InternalError("disk store read a wrong size");
  };
  Result<Json> figures = MeasureTransfer(duration, size, blocks, put, get);
  store.reset();
  std::filesystem::remove_all(dir);
  return figures;
}

}  // namespace

Result<Json> DiskStoreFormatsTask(const Json& task) {
  const std::string dir = task.at("dir").get<std::string>();
  const uint64_t size = task.value("size", uint64_t{1} << 20);
  // Enough keys that every timed put writes a new block.
  const int blocks = task.value("ids", 100000);
  const Duration duration = DurationOf(task);
  BM_ASSIGN_OR_RETURN(
      Json plain, MeasureFormat(dir + "/plain", DiskValueFormat::kPlain, size, blocks, duration));
  BM_ASSIGN_OR_RETURN(
      Json blob, MeasureFormat(dir + "/blob", DiskValueFormat::kBlobFiles, size, blocks, duration));
  return Json{{"plain_put_bytes_per_s", plain["put_bytes_per_s"]},
              {"plain_get_bytes_per_s", plain["get_bytes_per_s"]},
              {"blob_put_bytes_per_s", blob["put_bytes_per_s"]},
              {"blob_get_bytes_per_s", blob["get_bytes_per_s"]}};
}

}  // namespace bm::bench
