#include "worker/disk/chunk_file_deleter.h"

#include <rocksdb/file_system.h>
#include <spdlog/spdlog.h>

namespace bm::disk {

ChunkFileDeleter::ChunkFileDeleter(rocksdb::FileSystem* fs, std::chrono::milliseconds hang_timeout)
    : hang_timeout_(hang_timeout), state_(std::make_shared<State>(fs)) {
  thread_ = std::thread([state = state_] { Loop(state); });
}

ChunkFileDeleter::~ChunkFileDeleter() {
  bool hung = false;
  {
    MutexLock lock(state_->mutex);
    state_->stopping = true;
    state_->queued.notify_one();
    // Stopping deletes what is queued first (a file left behind waits for the next open), as
    // long as each deletion finishes in time.
    while (!state_->queue.empty() || state_->deleting_since.has_value()) {
      if (state_->deleting_since.has_value() &&
          std::chrono::steady_clock::now() - *state_->deleting_since > hang_timeout_) {
        hung = true;
        break;
      }
      const auto deadline = state_->deleting_since.has_value()
                                ? *state_->deleting_since + hang_timeout_
                                : std::chrono::steady_clock::now() + hang_timeout_;
      static_cast<void>(lock.WaitUntil(state_->drained, deadline));
    }
    if (hung) {
      spdlog::warn(
          "chunk file deleter: a deletion has run past {} ms (the disk hangs); abandoning its "
          "thread with {} files still queued (the next open deletes them)",
          hang_timeout_.count(), state_->queue.size());
      state_->queue.clear();
    }
  }
  if (hung) {
    thread_.detach();  // it holds the state; stops after the stuck deletion, if that ever ends
  } else {
    thread_.join();
  }
}

void ChunkFileDeleter::Delete(std::string path, uint64_t bytes) {
  state_->pending_bytes.fetch_add(bytes, std::memory_order_relaxed);
  {
    MutexLock lock(state_->mutex);
    state_->queue.push_back(State::Doomed{std::move(path), bytes});
  }
  state_->queued.notify_one();
}

void ChunkFileDeleter::Drain() {
  MutexLock lock(state_->mutex);
  while (!state_->queue.empty() || state_->deleting_since.has_value()) {
    lock.Wait(state_->drained);
  }
}

void ChunkFileDeleter::Loop(const std::shared_ptr<State>& state) {
  MutexLock lock(state->mutex);
  while (true) {
    while (!state->stopping && state->queue.empty()) lock.Wait(state->queued);
    if (state->queue.empty()) return;
    const State::Doomed doomed = std::move(state->queue.front());
    state->queue.pop_front();
    state->deleting_since = std::chrono::steady_clock::now();
    lock.Unlock();
    rocksdb::IOStatus s = state->fs->DeleteFile(doomed.path, rocksdb::IOOptions(), nullptr);
    if (!s.ok() && !s.IsPathNotFound() && !s.IsNotFound()) {
      spdlog::warn("could not delete chunk file {} (the next open deletes it): {}", doomed.path,
                   s.ToString());
    }
    state->pending_bytes.fetch_sub(doomed.bytes, std::memory_order_relaxed);
    lock.Lock();
    state->deleting_since.reset();
    if (state->queue.empty()) state->drained.notify_all();
  }
}

}  // namespace bm::disk
