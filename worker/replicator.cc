#include "worker/replicator.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "client/client.h"

namespace bm {

Replicator::Replicator(zmq::context_t& context, std::string own_address,
                       std::string own_public_key, ClientOptions client_options,
                       std::function<void()> notify)
    : own_address_(std::move(own_address)),
      own_public_key_(std::move(own_public_key)),
      client_options_(std::move(client_options)),
      notify_(std::move(notify)) {
  thread_ = std::thread([this, &context] { Run(context); });
}

Replicator::~Replicator() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Replicator::Submit(Job job) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
    ++outstanding_;
  }
  wake_.notify_all();
}

std::vector<Replicator::Finished> Replicator::TakeFinished() {
  std::lock_guard lock(mutex_);
  outstanding_ -= finished_.size();
  return std::exchange(finished_, {});
}

size_t Replicator::outstanding() const {
  std::lock_guard lock(mutex_);
  return outstanding_;
}

void Replicator::Run(zmq::context_t& context) {
  // The client never talks to the master: CopyBlock goes straight to the workers.
  ClientOptions options = client_options_;
  options.master_address = "inproc://bm-replicator-no-master";
  Client client(options, context);
  client.TrustWorkerKey(own_address_, own_public_key_);
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    Result<uint32_t> copies = client.CopyBlock(job.block, own_address_, job.targets, job.level);
    if (copies.ok()) {
      spdlog::info("copied {} to {} of {} workers", job.block.ToString(), *copies,
                   job.targets.size());
    } else {
      spdlog::warn("could not copy {}: {}", job.block.ToString(), copies.status().ToString());
    }
    lock.lock();
    finished_.push_back(Finished{job.ticket, std::move(copies)});
    lock.unlock();
    notify_();
    lock.lock();
  }
}

}  // namespace bm
