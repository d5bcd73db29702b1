#include "worker/disk/disk_store_writer.h"

#include <algorithm>

#include "worker/disk/chunk_files.h"
#include "worker/disk/disk_format.h"
#include "worker/disk/disk_store.h"

namespace bm {

DiskStoreWriter::DiskStoreWriter(DiskStore& store, const BlockId& id, StorageLevel level,
                                 uint64_t total_size, uint64_t generation, uint64_t version,
                                 uint64_t opening, std::unique_ptr<disk::ChunkFileWriter> file)
    : store_(store),
      id_(id),
      level_(level),
      total_size_(total_size),
      generation_(generation),
      version_(version),
      opening_(opening),
      file_(std::move(file)),
      in_file_(file_ != nullptr) {}

DiskStoreWriter::~DiskStoreWriter() { Abandon(); }

Status DiskStoreWriter::Append(std::span<const std::byte> bytes) {
  if (state_ != State::kWriting) return InvalidArgumentError(Describe() + " is not open");
  if (bytes.size() > total_size_ - appended_) {
    Abandon();
    return InvalidArgumentError(Describe() + ": " + std::to_string(appended_ + bytes.size()) +
                                " bytes appended, more than the declared " +
                                std::to_string(total_size_));
  }
  appended_ += bytes.size();
  digester_.Update(bytes);
  if (in_file_) {
    Status s = store_.AppendToFile(*file_, bytes, opening_, Describe());
    if (!s.ok()) Abandon();
    return s;
  }
  while (!bytes.empty()) {
    // A whole chunk that is not the block's last goes straight from the caller's bytes.
    if (buffer_.empty() && bytes.size() >= kChunkBytes && !IsLastChunk()) {
      Status s = PutChunk(bytes.first(kChunkBytes));
      if (!s.ok()) return s;
      bytes = bytes.subspan(kChunkBytes);
      continue;
    }
    size_t n = std::min(kChunkBytes - buffer_.size(), bytes.size());
    buffer_.insert(buffer_.end(), bytes.begin(), bytes.begin() + n);
    bytes = bytes.subspan(n);
    // The last chunk waits for Commit(), which writes it in one batch with the meta.
    if (buffer_.size() == kChunkBytes && !IsLastChunk()) {
      Status s = PutChunk(buffer_);
      if (!s.ok()) return s;
      buffer_.clear();
    }
  }
  return Status::Ok();
}

void DiskStoreWriter::AdoptUnitDigests(std::span<const uint64_t> digests) {
  digester_.AdoptUnits(digests);
}

Status DiskStoreWriter::Commit() {
  if (state_ != State::kWriting) return InvalidArgumentError(Describe() + " is not open");
  if (appended_ != total_size_) {
    Abandon();
    return InvalidArgumentError(Describe() + ": only " + std::to_string(appended_) + " of " +
                                std::to_string(total_size_) + " bytes were written");
  }
  if (in_file_) next_chunk_ = disk::ChunkCount(total_size_, kChunkBytes);
  disk::Meta meta{level_,
                  total_size_,
                  generation_,
                  next_chunk_ + (buffer_.empty() ? 0 : 1),
                  static_cast<uint32_t>(kChunkBytes),
                  /*legacy=*/false,
                  version_,
                  digester_.Finish().units,
                  in_file_};
  if (in_file_) {
    // Every byte, and the trailer describing them, is in the file before the meta that names
    // it is committed.
    if (Status s = store_.FinishFile(*file_, id_, meta, opening_, Describe()); !s.ok()) {
      Abandon();
      return s;
    }
  }
  BM_CHECK(meta.chunk_count == disk::ChunkCount(total_size_, kChunkBytes));
  Status s = store_.CommitVersion(id_, meta, buffer_, opening_, Describe());
  if (!s.ok()) {
    Abandon();
    return s;
  }
  state_ = State::kCommitted;
  std::vector<std::byte>().swap(buffer_);
  return Status::Ok();
}

Status DiskStoreWriter::PutChunk(std::span<const std::byte> bytes) {
  Status s = store_.PutChunk(generation_, next_chunk_, bytes, opening_, Describe());
  if (!s.ok()) {
    Abandon();
    return s;
  }
  ++next_chunk_;
  return Status::Ok();
}

void DiskStoreWriter::Abandon() {
  if (state_ != State::kWriting) return;
  state_ = State::kAbandoned;
  std::vector<std::byte>().swap(buffer_);
  file_.reset();  // closed before it is deleted
  store_.AbandonWrite(generation_, total_size_, next_chunk_, in_file_, Describe());
}

std::string DiskStoreWriter::Describe() const {
  return "disk write of block " + id_.ToString() + " (generation " + std::to_string(generation_) +
         ")";
}

}  // namespace bm
