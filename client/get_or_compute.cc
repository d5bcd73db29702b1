// Client::GetOrCompute and the compute-lease calls behind it (schema/PROTOCOL.md, "Compute
// leases").

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <zmq.hpp>

#include "client/client_impl.h"
#include "client/lease_renewer.h"
#include "client/reply_decoding.h"
#include "common/core/protocol.h"
#include "common/net/transport.h"

namespace bm {
namespace {

using std::chrono::milliseconds;

// Releases a compute lease when the computation leaves scope, however it leaves (an error, an
// exception from the compute function): the next waiter then computes at once instead of
// waiting for the lease to expire. After a successful store the lease has already ended
// (the block's report ends it) and the release is a no-op on the master.
class LeaseReleaser {
 public:
  LeaseReleaser(std::function<Status(uint64_t)> release, uint64_t token)
      : release_(std::move(release)), token_(token) {}
  ~LeaseReleaser() {
    Status released = release_(token_);
    if (!released.ok()) spdlog::debug("releasing a compute lease failed: {}", released.ToString());
  }
  LeaseReleaser(const LeaseReleaser&) = delete;
  LeaseReleaser& operator=(const LeaseReleaser&) = delete;

  void set_token(uint64_t token) { token_ = token; }

 private:
  std::function<Status(uint64_t)> release_;
  uint64_t token_;
};

}  // namespace

Result<std::vector<std::byte>> Client::Impl::GetOrCompute(const BlockId& id, StorageLevel level,
                                                          const ComputeFn& compute) {
  const auto started = std::chrono::steady_clock::now();
  const milliseconds deadline = options_.get_or_compute_deadline;
  // How long the next acquireCompute may wait; nullopt once the deadline has passed.
  auto next_wait = [&]() -> std::optional<milliseconds> {
    if (deadline.count() <= 0) return options_.compute_wait;
    const auto left = deadline - std::chrono::duration_cast<milliseconds>(
                                     std::chrono::steady_clock::now() - started);
    if (left.count() <= 0) return std::nullopt;
    return std::min(options_.compute_wait, left);
  };
  std::vector<std::string> failed_workers;  // workers that could not serve a listed copy
  if (const std::vector<BlockLocation>* cached = location_cache_.Find(id)) {
    // This client read or stored the block before: read it without asking the master. A
    // stale entry (the block moved or its worker failed) is forgotten by the read, and the
    // master is asked as below, told which workers failed.
    ReadReport report;
    Result<std::vector<std::byte>> data = ReadWhole(id, *cached, report);
    if (data.ok()) {
      ++(report.local ? counters_.local_hits : counters_.remote_hits);
      return data;
    }
    const StatusCode code = data.status().code();
    if (code != StatusCode::kUnavailable && code != StatusCode::kNotFound) return data.status();
    failed_workers = std::move(report.failed_workers);
  }
  bool missed = false;
  while (true) {
    const std::optional<milliseconds> wait = next_wait();
    if (!wait) {
      return UnavailableError("get-or-compute of " + id.ToString() + " gave up after " +
                              std::to_string(deadline.count()) +
                              " ms: another client is still computing it");
    }
    BM_ASSIGN_OR_RETURN(ComputeTicket ticket, AcquireCompute(id, failed_workers, *wait));
    switch (ticket.kind) {
      case ComputeTicket::Kind::kCached: {
        if (ticket.locations.empty()) break;  // stored and already gone again: ask again
        ReadReport report;
        Result<std::vector<std::byte>> data = ReadWhole(id, std::move(ticket.locations), report);
        if (data.ok()) {
          if (missed) {
            ++counters_.waits;
          } else {
            ++(report.local ? counters_.local_hits : counters_.remote_hits);
          }
          return data;
        }
        // Every listed copy failed (a worker died or lost the block): ask again naming them,
        // so the master treats the block as missing unless another copy exists.
        const StatusCode code = data.status().code();
        if (code != StatusCode::kUnavailable && code != StatusCode::kNotFound) {
          return data.status();
        }
        if (report.failed_workers.empty()) return data.status();  // nothing new to exclude
        spdlog::info("{}: no listed copy could be read ({}); asking again", id.ToString(),
                     data.status().message());
        for (std::string& worker : report.failed_workers) {
          if (std::find(failed_workers.begin(), failed_workers.end(), worker) ==
              failed_workers.end()) {
            failed_workers.push_back(std::move(worker));
          }
        }
        break;
      }
      case ComputeTicket::Kind::kBusy:
        break;  // another client is still computing it; ask again
      case ComputeTicket::Kind::kGranted:
        if (!missed) ++counters_.misses;
        return ComputeAndStore(id, level, compute, ticket.token);
    }
    if (!missed) {
      missed = true;
      ++counters_.misses;
    }
  }
}

Result<std::vector<std::byte>> Client::Impl::ComputeAndStore(const BlockId& id, StorageLevel level,
                                                             const ComputeFn& compute,
                                                             uint64_t token) {
  LeaseReleaser releaser([this, id](uint64_t held) { return ReleaseCompute(id, held); }, token);
  // Renew every third of the lease, so a renewal can be lost or late twice before it expires.
  // The keys were read: the master granted the lease over them.
  BM_CHECK(keys_.ok());
  const milliseconds renew_every = std::max(options_.compute_lease / 3, milliseconds(1));
  // Through a failover too: the lease outlives it (the new leader restores it from the
  // journal), and the renewals follow the leader.
  LeaseRenewer renewer(std::make_unique<MasterClient>(
                           context_, options_.master_address, options_.request_timeout,
                           ChannelSecurity{keys_->own, keys_->master_key}, renew_every, directory_),
                       id, token, renew_every);
  ++counters_.computes;
  uint64_t lease = token;  // the lease the result is stored under
  // The wall time of the computation travels with the put: the worker's cost-aware eviction
  // keeps what is expensive to recompute (docs/eviction.md "Eviction").
  const auto compute_started = std::chrono::steady_clock::now();
  Result<std::vector<std::byte>> computed = compute();
  const auto compute_cost = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::steady_clock::now() - compute_started);
  if (!computed.ok()) return computed;
  if (renewer.lost()) {
    // The lease expired (this process stalled) and may have been handed to another client, or
    // the block appeared meanwhile. Store only if the master grants a lease again, so two
    // clients never both store it.
    Result<ComputeTicket> again = AcquireCompute(id, {}, milliseconds(0));
    if (!again.ok() || again->kind != ComputeTicket::Kind::kGranted) {
      spdlog::info("{}: computed, but not stored: another client took over its computation",
                   id.ToString());
      return computed;
    }
    releaser.set_token(again->token);
    lease = again->token;
  }
  // The renewer keeps running through the put: a big block's upload can outlast the lease.
  PutOptions put_options;
  put_options.compute_lease = lease;
  // At least 1 us: a measured cost is never "not stated".
  put_options.compute_cost = std::max(compute_cost, std::chrono::microseconds(1));
  Result<PutResult> stored = Put(id, *computed, level, put_options);
  renewer.Stop();
  if (!stored.ok()) {
    ++counters_.store_failures;
    spdlog::warn("{}: computed, but could not be cached: {}", id.ToString(),
                 stored.status().ToString());
  }
  return computed;
}

Result<Client::Impl::ComputeTicket> Client::Impl::AcquireCompute(
    const BlockId& id, const std::vector<std::string>& failed_workers, milliseconds wait) {
  capnp::MallocMessageBuilder message;
  proto::AcquireCompute::Builder acquire = message.initRoot<proto::Request>().initAcquireCompute();
  acquire.setBlockId(id.ToString());
  acquire.setHolder(holder_name_);
  acquire.setLeaseMs(static_cast<uint32_t>(options_.compute_lease.count()));
  acquire.setWaitMs(static_cast<uint32_t>(wait.count()));
  auto failed = acquire.initFailedWorkers(failed_workers.size());
  for (size_t i = 0; i < failed_workers.size(); ++i) failed.set(i, failed_workers[i]);
  BM_ASSIGN_OR_RETURN(IncomingMessage reply, master_.Call(message, wait));
  ComputeTicket ticket;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::Reply::Reader r = reply.reply();
    if (!r.isCompute()) {
      return InternalError("master answered acquireCompute with something other than 'compute'");
    }
    proto::ComputeReply::Reader compute = r.getCompute();
    switch (compute.which()) {
      case proto::ComputeReply::CACHED:
        ticket.kind = ComputeTicket::Kind::kCached;
        for (proto::Location::Reader location : compute.getCached().getLocations()) {
          ticket.locations.push_back(reply_decoding::ToBlockLocation(location));
          ticket.locations.back().block_digest = compute.getCached().getDigest();
        }
        return Status::Ok();
      case proto::ComputeReply::GRANTED:
        ticket.kind = ComputeTicket::Kind::kGranted;
        ticket.token = compute.getGranted();
        return Status::Ok();
      case proto::ComputeReply::BUSY:
        ticket.kind = ComputeTicket::Kind::kBusy;
        return Status::Ok();
      default:
        return InternalError("master sent an unknown compute answer");
    }
  }));
  return ticket;
}

Status Client::Impl::ReleaseCompute(const BlockId& id, uint64_t token) {
  capnp::MallocMessageBuilder message;
  proto::ComputeLease::Builder release = message.initRoot<proto::Request>().initReleaseCompute();
  release.setBlockId(id.ToString());
  release.setToken(token);
  return master_.Call(message).status();
}

}  // namespace bm
