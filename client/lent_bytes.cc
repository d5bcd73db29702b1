#include "client/lent_bytes.h"

#include <cassert>

namespace bm {

class LentBytes::LentChunk final : public Chunk {
 public:
  LentChunk(std::span<const std::byte> bytes, std::shared_ptr<Count> count)
      : bytes_(bytes), count_(std::move(count)) {}
  // May run on a ZeroMQ I/O thread, when it has sent the frame.
  ~LentChunk() override {
    MutexLock lock(count_->mutex);
    if (--count_->out == 0) count_->returned.notify_all();
  }
  std::span<const std::byte> bytes() const override { return bytes_; }

 private:
  std::span<const std::byte> bytes_;
  std::shared_ptr<Count> count_;
};

LentBytes::LentBytes(std::span<const std::byte> bytes) : bytes_(bytes) {}

LentBytes::~LentBytes() { AwaitReturned(); }

ChunkPtr LentBytes::Lend(size_t offset, size_t length) {
  assert(offset <= bytes_.size() && length <= bytes_.size() - offset);
  {
    MutexLock lock(count_->mutex);
    ++count_->out;
  }
  return std::make_shared<LentChunk>(bytes_.subspan(offset, length), count_);
}

void LentBytes::AwaitReturned() {
  MutexLock lock(count_->mutex);
  while (count_->out != 0) lock.Wait(count_->returned);
}

}  // namespace bm
