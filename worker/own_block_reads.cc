#include "worker/own_block_reads.h"

#include <utility>

#include "worker/block_manager.h"

namespace bm {

void OwnBlockReads::Answer::Set(Result<BlockRead> read) {
  if (answered) return;
  answered = true;
  promise.set_value(std::move(read));
}

Result<BlockRead> OwnBlockReads::Read(const BlockId& id, uint64_t offset, uint64_t max_length) {
  auto answer = std::make_shared<Answer>();
  std::future<Result<BlockRead>> future = answer->promise.get_future();
  {
    MutexLock lock(mutex_);
    if (closed_) return AbortedError("the worker is stopping");
    queued_.push_back(Request{id, offset, max_length, std::move(answer)});
  }
  notify_();
  return future.get();
}

void OwnBlockReads::ServeQueued(BlockManager& blocks) {
  std::deque<Request> requests;
  {
    MutexLock lock(mutex_);
    requests.swap(queued_);
  }
  std::erase_if(started_, [](const std::shared_ptr<Answer>& answer) { return answer->answered; });
  for (Request& request : requests) {
    started_.push_back(request.answer);
    blocks.Read(request.id, request.offset, request.max_length,
                [answer = std::move(request.answer)](Result<BlockRead> read) {
                  answer->Set(std::move(read));
                });
  }
}

void OwnBlockReads::Close() {
  std::deque<Request> requests;
  {
    MutexLock lock(mutex_);
    closed_ = true;
    requests.swap(queued_);
  }
  for (Request& request : requests) started_.push_back(std::move(request.answer));
  for (const std::shared_ptr<Answer>& answer : started_) {
    answer->Set(AbortedError("the worker is stopping"));
  }
  started_.clear();
}

}  // namespace bm
