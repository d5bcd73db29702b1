#include "client/multi_get.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <utility>
#include <zmq.hpp>

#include "client/location_cache.h"
#include "common/core/digest.h"
#include "common/core/protocol.h"
#include "common/net/transport.h"
#include "transfer/peer_calls.h"
#include "transfer/worker_channels.h"

namespace bm {

using std::chrono::milliseconds;

MultiGet::MultiGet(WorkerChannels& channels, LocationCache& location_cache, CacheCounters& counters)
    : channels_(channels), location_cache_(location_cache), counters_(counters) {}

MultiGet::~MultiGet() = default;

std::vector<Result<BlockData>> MultiGet::Read(const std::vector<BlockId>& ids, Reads& reads) {
  Call call{ids,
            std::vector<Result<BlockData>>(ids.size(), InternalError("not read")),
            std::vector<uint64_t>(ids.size()),
            {},
            {}};
  std::vector<Result<BlockData>>& out = call.out;
  std::vector<uint64_t>& sizes = call.sizes;
  // Whether an address is this host's, asked once per address rather than once per block.
  std::map<std::string, bool, std::less<>> local;
  auto is_local = [&](const std::string& address) {
    auto it = local.find(address);
    if (it == local.end()) it = local.emplace(address, reads.IsLocalAddress(address)).first;
    return it->second;
  };
  auto preferred = [&](const std::vector<BlockLocation>& locations) -> const BlockLocation& {
    if (locations.size() == 1) return locations.front();
    auto found = std::find_if(locations.begin(), locations.end(),
                              [&](const BlockLocation& l) { return is_local(l.address); });
    return found != locations.end() ? *found : locations.front();
  };
  // The reads of remembered blocks go out before anything is looked up.
  std::map<std::string, std::vector<size_t>> by_worker;
  std::vector<size_t> unknown;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (const std::vector<BlockLocation>* cached = location_cache_.Find(ids[i])) {
      const BlockLocation& from = preferred(*cached);
      by_worker[from.address].push_back(i);
      sizes[i] = from.size;
    } else {
      unknown.push_back(i);
    }
  }
  SendBatches(by_worker, call);
  // The others are looked up in chunks that grow, and each chunk's reads are sent as soon as
  // its locations are known: the workers serve one chunk while the master answers the next
  // (one lookup of all 10,000 ids of workload 7 at once left the workers idle meanwhile).
  constexpr size_t kFirstLookupChunk = 256;
  constexpr size_t kMaxLookupChunk = 4096;
  for (size_t first = 0, chunk = kFirstLookupChunk; first < unknown.size();
       first += chunk, chunk = std::min(2 * chunk, kMaxLookupChunk)) {
    const size_t n = std::min(chunk, unknown.size() - first);
    std::vector<BlockId> lookup;
    lookup.reserve(n);
    for (size_t k = 0; k < n; ++k) lookup.push_back(ids[unknown[first + k]]);
    Result<std::vector<BlockLocations>> found = reads.Locations(lookup);
    if (!found.ok()) {  // the master is not answering: the ids left unread fail with why
      for (size_t k = first; k < unknown.size(); ++k) out[unknown[k]] = found.status();
      break;
    }
    by_worker.clear();
    for (size_t k = 0; k < n; ++k) {
      const size_t i = unknown[first + k];
      if ((*found)[k].lost) {
        out[i] = DataLossError(LostBlockMessage(*(*found)[k].lost));
      } else if ((*found)[k].locations.empty()) {
        out[i] = NotFoundError("block " + ids[i].ToString() + " is not stored on any live worker");
      } else {
        const BlockLocation& from = preferred((*found)[k].locations);
        by_worker[from.address].push_back(i);
        sizes[i] = from.size;
        location_cache_.Remember(ids[i], std::move((*found)[k].locations));
      }
    }
    SendBatches(by_worker, call);
  }
  AwaitBatches(call);
  for (size_t i : call.retry) {
    Result<std::vector<std::byte>> alone = reads.Get(ids[i]);
    if (!alone.ok()) {
      out[i] = alone.status();
      continue;
    }
    BlockData data;
    if (!alone->empty()) data.Append(std::make_shared<VectorChunk>(std::move(alone).value()));
    out[i] = std::move(data);
  }
  return std::move(call.out);
}

namespace {

// Expected bytes one getBlocks of GetMany asks for: 256 blocks of 4 KiB (the packed reply is
// one 1 MiB frame). A cap of 64 ids costs four requests and replies for the same bytes (more
// worker CPU, measured in bench workload 7), and a 1 MiB reply is still small enough to be on
// its way while the worker packs the next.
constexpr uint64_t kGetBlocksBatchBytes = 1 << 20;

}  // namespace

// A block the worker cannot fit in its reply comes back notIncluded and is read alone.
size_t MultiGet::BatchLength(const std::vector<size_t>& indexes, size_t start,
                             const std::vector<uint64_t>& sizes) {
  size_t count = 0;
  uint64_t bytes = 0;
  while (start + count < indexes.size() && count < kMaxGetBlocksIds) {
    const uint64_t size = sizes[indexes[start + count]];
    if (count > 0 && bytes + size > kGetBlocksBatchBytes) break;
    bytes += size;
    ++count;
  }
  return count;
}

zmq::socket_t* MultiGet::PipelineTo(const std::string& address) {
  Result<std::string> key = channels_.Key(address);
  if (!key.ok()) return nullptr;
  Pipeline& pipeline = pipelines_[address];
  if (pipeline.socket && pipeline.key == *key) return pipeline.socket.get();
  // A socket made for another key must not be reused for this one.
  pipeline.key = *key;
  try {
    pipeline.socket =
        std::make_unique<zmq::socket_t>(channels_.context(), zmq::socket_type::dealer);
    // Cannot fail: with keys on, the channels returned a key.
    BM_CHECK(ConfigureClientSocket(*pipeline.socket, {channels_.keys(), *key}, address).ok());
    pipeline.socket->set(zmq::sockopt::sndtimeo, static_cast<int>(channels_.timeout().count()));
    pipeline.socket->connect(address);
  } catch (const zmq::error_t&) {
    pipelines_.erase(address);
    return nullptr;
  }
  return pipeline.socket.get();
}

void MultiGet::SendBatches(const std::map<std::string, std::vector<size_t>>& by_worker,
                           Call& call) {
  for (const auto& [address, indexes] : by_worker) {
    // Without a socket (no key the master vouches for) the one-by-one reads report why.
    zmq::socket_t* socket = PipelineTo(address);
    if (socket == nullptr) {
      call.retry.insert(call.retry.end(), indexes.begin(), indexes.end());
      continue;
    }
    for (size_t start = 0, count = 0; start < indexes.size(); start += count) {
      count = BatchLength(indexes, start, call.sizes);
      PendingBatch batch{address,
                         {indexes.begin() + static_cast<ptrdiff_t>(start),
                          indexes.begin() + static_cast<ptrdiff_t>(start + count)}};
      const uint64_t request_id = next_request_id_++;
      capnp::MallocMessageBuilder message;
      proto::Request::Builder request = message.initRoot<proto::Request>();
      request.setId(request_id);
      auto list = request.initGetBlocks().initBlockIds(static_cast<unsigned>(count));
      for (size_t k = 0; k < count; ++k) {
        list.set(static_cast<unsigned>(k), call.ids[batch.indexes[k]].ToString());
      }
      if (!SendMessage(*socket, nullptr, message).ok()) {
        call.retry.insert(call.retry.end(), batch.indexes.begin(), batch.indexes.end());
        continue;
      }
      call.in_flight.emplace(request_id, std::move(batch));
    }
  }
}

void MultiGet::AwaitBatches(Call& call) {
  std::map<uint64_t, PendingBatch>& in_flight = call.in_flight;
  std::vector<std::string> addresses;
  for (const auto& [request_id, batch] : in_flight) addresses.push_back(batch.address);
  std::sort(addresses.begin(), addresses.end());
  addresses.erase(std::unique(addresses.begin(), addresses.end()), addresses.end());
  const auto deadline = std::chrono::steady_clock::now() + channels_.timeout();
  if (addresses.size() == 1) {
    // One worker (GetMany's usual case): a receive bounded by the time left, without a
    // zmq::poll pass first, which costs system calls of its own on every reply (as in
    // RpcChannel::Call).
    zmq::socket_t& socket = *pipelines_[addresses.front()].socket;
    while (!in_flight.empty()) {
      const auto left =
          std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      socket.set(zmq::sockopt::rcvtimeo, static_cast<int>(left.count()));
      Result<IncomingMessage> received = ReceiveMessage(socket, /*has_routing_id=*/false);
      if (received.ok()) {
        TakeBatchReply(*received, call);
      } else if (received.status().code() == StatusCode::kUnavailable) {
        break;  // the time is up
      }
    }
  }
  while (!in_flight.empty() && addresses.size() > 1) {
    std::vector<zmq::pollitem_t> items;
    for (const std::string& address : addresses) {
      items.push_back({pipelines_[address].socket->handle(), 0, ZMQ_POLLIN, 0});
    }
    const auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || zmq::poll(items, std::max(left, milliseconds(0))) == 0) break;
    for (size_t w = 0; w < items.size(); ++w) {
      if (!(items[w].revents & ZMQ_POLLIN)) continue;
      Result<IncomingMessage> received =
          ReceiveMessage(*pipelines_[addresses[w]].socket, /*has_routing_id=*/false);
      if (received.ok()) TakeBatchReply(*received, call);
    }
  }
  // Unanswered in time: late replies must not meet a later call, so those sockets go, and
  // their blocks are read again one by one (which falls over to other copies).
  for (const auto& [request_id, batch] : in_flight) {
    pipelines_.erase(batch.address);
    call.retry.insert(call.retry.end(), batch.indexes.begin(), batch.indexes.end());
  }
}

void MultiGet::TakeBatchReply(IncomingMessage& message, Call& call) {
  const std::vector<BlockId>& ids = call.ids;
  std::map<uint64_t, PendingBatch>& in_flight = call.in_flight;
  uint64_t request_id = 0;
  Status status = ReadGuarded([&]() -> Status {
    request_id = message.reply().getId();
    return Status::Ok();
  });
  auto found = in_flight.find(request_id);
  if (!status.ok() || found == in_flight.end()) return;  // garbled, or a stale reply
  const std::vector<size_t> indexes = std::move(found->second.indexes);
  in_flight.erase(found);
  // The included blocks' bytes, back to back over the frames. Each block is handed out as
  // slices of the frames it lies in (no copy); a slice keeps its frame alive.
  const uint64_t payload_bytes = message.payload_bytes();
  const std::vector<ChunkPtr> frames = message.TakePayloadChunks();
  size_t frame = 0, frame_offset = 0;
  auto take = [&](uint64_t n, BlockData& block) {
    while (n > 0 && frame < frames.size()) {
      const size_t available = frames[frame]->size() - frame_offset;
      const size_t k = static_cast<size_t>(std::min<uint64_t>(available, n));
      block.Append(SliceChunk(frames[frame], frame_offset, k));
      n -= k;
      frame_offset += k;
      if (frame_offset == frames[frame]->size()) {
        ++frame;
        frame_offset = 0;
      }
    }
    return n == 0;
  };
  std::vector<size_t> to_retry;
  std::vector<std::span<const std::byte>> pieces;
  std::vector<uint64_t> digests;
  status = ReadGuarded([&]() -> Status {
    proto::Reply::Reader reply = message.reply();
    if (!reply.isBlocksRead()) return UnexpectedReply("worker", "blocksRead");
    auto entries = reply.getBlocksRead();
    if (entries.size() != indexes.size()) return InternalError("worker answered a wrong count");
    for (size_t k = 0; k < indexes.size(); ++k) {
      proto::MultiGetEntry::Reader entry = entries[static_cast<unsigned>(k)];
      const size_t index = indexes[k];
      if (entry.getState() != proto::MultiGetEntry::State::INCLUDED) {
        // Moved or removed since this client learnt where it was: ask the master again.
        if (entry.getState() == proto::MultiGetEntry::State::NOT_FOUND) {
          location_cache_.Forget(ids[index]);
        }
        to_retry.push_back(index);
        continue;
      }
      const uint64_t size = entry.getTotalSize();
      if (size > payload_bytes) return InternalError("worker announced more bytes than it sent");
      BlockData block;
      if (!take(size, block)) {
        return InternalError("worker sent fewer bytes of " + ids[index].ToString() +
                             " than it announced");
      }
      if (entry.hasUnitDigests()) {
        digests.clear();
        for (uint64_t digest : entry.getUnitDigests()) digests.push_back(digest);
        pieces.clear();
        for (const ChunkPtr& chunk : block.chunks) pieces.push_back(chunk->bytes());
        if (FirstBadUnit(pieces, 0, size, size, digests)) {
          // A corrupt copy, or bytes that went bad on the way: the block is read alone, which
          // reads past a bad copy to a good one and reports it.
          to_retry.push_back(index);
          continue;
        }
      }
      counters_.bytes_fetched += size;
      call.out[index] = std::move(block);
    }
    return Status::Ok();
  });
  if (!status.ok()) {
    // An error reply or a malformed one: every block of the batch is read again one by one,
    // which reports the reason for each.
    call.retry.insert(call.retry.end(), indexes.begin(), indexes.end());
    return;
  }
  call.retry.insert(call.retry.end(), to_retry.begin(), to_retry.end());
}

}  // namespace bm
