#pragma once

// What the DiskStore's tests do to a store again and again: open one, write a block through a
// DiskWriter, read a block back whole.

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/core/byte_size.h"
#include "tests/support/files.h"
#include "worker/disk/disk_store.h"

namespace bm::testing {

// Opens the store in `dir` with `options`; null (and a test failure) when it cannot.
inline std::unique_ptr<DiskStore> OpenDiskStore(const std::string& dir,
                                                DiskStoreOptions options = {}) {
  Result<std::unique_ptr<DiskStore>> store = DiskStore::Open(dir, std::move(options));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

// Writes `bytes` as a DISK_ONLY block through a DiskWriter, in appends of `piece` bytes.
inline Status WriteBlock(DiskStore& store, const BlockId& id, const std::vector<std::byte>& bytes,
                         size_t piece = 300 * kKiB) {
  BM_ASSIGN_OR_RETURN(std::unique_ptr<DiskWriter> writer,
                      store.BeginWrite(id, StorageLevel::kDiskOnly, bytes.size()));
  std::span<const std::byte> rest(bytes);
  while (!rest.empty()) {
    const size_t n = std::min(piece, rest.size());
    BM_RETURN_IF_ERROR(writer->Append(rest.first(n)));
    rest = rest.subspan(n);
  }
  return writer->Commit();
}

// The whole block as the store reads it; empty (and a test failure) when it cannot.
inline std::vector<std::byte> ReadAll(DiskStore& store, const BlockId& id) {
  Result<DiskRead> read = store.Read(id, 0, UINT64_MAX);
  EXPECT_TRUE(read.ok()) << read.status().ToString();
  return read.ok() ? Concat(read->chunks) : std::vector<std::byte>{};
}

}  // namespace bm::testing
