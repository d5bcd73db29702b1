// The disk store by itself, in this process: chunk files against plain RocksDB values against
// blob files for the same 1 MiB blocks (issue 5: "measure chunked plain values against blob
// files and keep the faster"; issue 30: keep large blocks out of the write-ahead log). No
// network, so the figures are the store's own. And the filesystem's own pace for a block:
// write(2) (+ fdatasync(2)) of its bytes to a file.

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "bench/tasks.h"
#include "worker/disk/disk_store.h"

namespace bm::bench {
namespace {

Result<Json> MeasureFormat(const std::string& dir, DiskValueFormat format, bool chunk_files,
                           uint64_t size, int blocks, const Duration& duration) {
  std::filesystem::remove_all(dir);
  // Starts once the page cache's dirty pages are written out, so no layout pays for the
  // writeback of the one measured before it.
  ::sync();
  DiskStoreOptions options;
  options.format = format;
  if (!chunk_files) options.chunk_file_min_bytes = UINT64_MAX;
  BM_ASSIGN_OR_RETURN(std::unique_ptr<DiskStore> store, DiskStore::Open(dir, std::move(options)));
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
  // "only": one layout alone, "files" or "plain" (to profile it).
  const std::string only = task.value("only", "");
  if (only == "plain") {
    return MeasureFormat(dir + "/plain", DiskValueFormat::kPlain, false, size, blocks, duration);
  }
  BM_ASSIGN_OR_RETURN(Json files, MeasureFormat(dir + "/files", DiskValueFormat::kPlain, true, size,
                                                blocks, duration));
  if (only == "files") return files;
  BM_ASSIGN_OR_RETURN(Json plain, MeasureFormat(dir + "/plain", DiskValueFormat::kPlain, false,
                                                size, blocks, duration));
  BM_ASSIGN_OR_RETURN(Json blob, MeasureFormat(dir + "/blob", DiskValueFormat::kBlobFiles, false,
                                               size, blocks, duration));
  return Json{{"files_put_bytes_per_s", files["put_bytes_per_s"]},
              {"files_get_bytes_per_s", files["get_bytes_per_s"]},
              {"plain_put_bytes_per_s", plain["put_bytes_per_s"]},
              {"plain_get_bytes_per_s", plain["get_bytes_per_s"]},
              {"blob_put_bytes_per_s", blob["put_bytes_per_s"]},
              {"blob_get_bytes_per_s", blob["get_bytes_per_s"]}};
}

// write(2) of `size` bytes to a file and, with "sync", fdatasync(2): the filesystem's pace for
// one block made durable, the ceiling of any store on it. With "new_files" every block is a
// file of its own, never one written before: on this VM every freshly written page is slow
// (bench/notes/2026-12-04-recompute-and-disk-puts.md), which bounds any writer of new bytes, so
// that is the bound a DISK_ONLY put of new blocks meets. The files are deleted at the end.
Result<Json> FileWriteSyncTask(const Json& task) {
  const std::string dir = task.at("dir").get<std::string>();
  const uint64_t size = task.value("size", uint64_t{64} << 20);
  const bool sync = task.value("sync", true);
  const bool new_files = task.value("new_files", false);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::vector<std::byte> data = PatternBytes(size);
  uint64_t next = 0;
  BM_ASSIGN_OR_RETURN(Timed writes, RunTimed(DurationOf(task), [&]() -> Status {
                        const uint64_t name = new_files ? next++ : next++ % 4;
                        const std::string path = dir + "/block-" + std::to_string(name);
                        const int fd =
                            ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
                        if (fd < 0) return InternalError(path + ": " + std::strerror(errno));
                        size_t done = 0;
                        while (done < data.size()) {
                          const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
                          if (n <= 0) {
                            ::close(fd);
                            return InternalError("write " + path + ": " + std::strerror(errno));
                          }
                          done += static_cast<size_t>(n);
                        }
                        const bool synced = !sync || ::fdatasync(fd) == 0;
                        const bool closed = ::close(fd) == 0;
                        if (!synced) return InternalError("fdatasync " + path);
                        if (!closed) return InternalError("close " + path);
                        return Status::Ok();
                      }));
  std::filesystem::remove_all(dir);
  return Json{{"write_bytes_per_s", writes.per_second() * static_cast<double>(size)},
              {"write_ops", writes.ops}};
}

}  // namespace bm::bench
