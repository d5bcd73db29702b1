#include "transfer/range_reader.h"

#include <algorithm>
#include <utility>

#include "common/core/digest.h"
#include "common/core/protocol.h"
#include "common/net/transport.h"
#include "transfer/peer_calls.h"

namespace bm {
namespace {

// Ranges a read keeps asked for beyond the one it is checking. None: measured side by side on
// two cores (bench workload 11), asking one or two ranges ahead made 64 MiB memory gets
// slower, not faster: the client and the worker already keep both cores busy, and ranges
// ahead only add bytes queued in memory. The window stays in the code (it handles ranges cut
// short) for machines with cores to spare.
constexpr size_t kReadWindow = 0;

Status DigestMismatch(const std::string& block, const std::string& peer, uint64_t unit,
                      uint64_t total) {
  return DataLossError("block " + block + " from " + peer + ": bytes " +
                       std::to_string(unit * kDigestUnitBytes) + " to " +
                       std::to_string(std::min<uint64_t>((unit + 1) * kDigestUnitBytes, total)) +
                       " do not match their digest (a corrupt copy, or corrupted in transit)");
}

}  // namespace

RangeReader::RangeReader(RpcChannel& channel, std::string peer, const BlockId& id)
    : channel_(channel), peer_(std::move(peer)), block_(id.ToString()) {}

RangeReader::~RangeReader() {
  for (const Asked& a : asked_) channel_.Abandon(a.request);
}

RangeReader::Outcome RangeReader::Read(const Sink& sink, uint64_t block_digest) {
  using Fault = Outcome::Fault;
  bool emitted = false;
  while (!done()) {
    Result<std::optional<uint64_t>> bad = ReceiveRange();
    if (!bad.ok()) return {bad.status(), Fault::kPeer, emitted};
    if (*bad) return {DigestMismatch(block_, peer_, **bad, total_), Fault::kCorruptCopy, emitted};
    for (std::span<const std::byte> bytes : ready()) {
      emitted = true;
      if (Status written = sink(bytes); !written.ok()) return {written, Fault::kSink, emitted};
    }
  }
  const uint64_t sent = SentBlockDigest();
  if (block_digest == 0 || sent == 0 || sent == block_digest) {
    return {total_, Fault::kNone, emitted};
  }
  return {DataLossError("block " + block_ + " from " + peer_ +
                        ": its unit digests make block digest " + DigestHex(sent) +
                        ", but the master keeps " + DigestHex(block_digest) + " for this version"),
          Fault::kWrongBlockDigest, emitted};
}

Status RangeReader::NextRange() {
  BM_ASSIGN_OR_RETURN(std::optional<uint64_t> bad, ReceiveRange());
  if (bad) return DigestMismatch(block_, peer_, *bad, total_);
  return Status::Ok();
}

Status RangeReader::Ask() {
  capnp::MallocMessageBuilder message;
  proto::GetBlock::Builder get = message.initRoot<proto::Request>().initGetBlock();
  get.setBlockId(block_);
  get.setOffset(asked_end_);
  get.setMaxLength(kMaxPieceBytes);
  Result<uint64_t> request = channel_.Send(message);
  if (!request.ok()) return WithPeer(request.status(), peer_);
  asked_.push_back({*request, asked_end_});
  asked_end_ += kMaxPieceBytes;
  return Status::Ok();
}

Result<std::optional<uint64_t>> RangeReader::ReceiveRange() {
  frames_.clear();
  // One range until the block's size is known; then up to kReadWindow more.
  if (asked_.empty()) BM_RETURN_IF_ERROR(Ask());
  while (true) {
    const Asked next = asked_.front();
    asked_.pop_front();
    Result<IncomingMessage> awaited = channel_.Await(next.request);
    if (!awaited.ok()) return WithPeer(awaited.status(), peer_);
    IncomingMessage& reply = *awaited;
    if (next.offset != offset_) {
      // Asked for past a range the worker cut short: the range after it is asked again.
      if (asked_.empty()) BM_RETURN_IF_ERROR(Ask());
      continue;
    }
    uint64_t reply_total = 0, reply_offset = 0, length = 0, reply_generation = 0, version = 0;
    std::vector<uint64_t> unit_digests;
    BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
      proto::Reply::Reader r = reply.reply();
      if (!r.isGet()) return UnexpectedReply(peer_, "get");
      proto::GetReply::Reader g = r.getGet();
      reply_total = g.getTotalSize();
      reply_offset = g.getOffset();
      length = g.getLength();
      reply_generation = g.getGeneration();
      version = g.getVersion();
      for (uint64_t digest : g.getUnitDigests()) unit_digests.push_back(digest);
      return Status::Ok();
    }));
    if (generation_ && reply_generation != *generation_) {
      return AbortedError(block_ + " was replaced on " + peer_ + " while being read");
    }
    if (generation_ && reply_total != total_) {
      return InternalError(peer_ + " changed the size of " + block_ + " within one generation");
    }
    generation_ = reply_generation;
    total_ = reply_total;
    version_ = version;
    if (reply_offset != offset_ || offset_ > total_ || length > total_ - offset_ ||
        length > kMaxPieceBytes || reply.payload_bytes() != length ||
        (length == 0 && offset_ < total_)) {
      return InternalError(peer_ + " sent a malformed range of " + block_);
    }
    if (!verifier_) verifier_.emplace(total_);
    // A short range (the worker caps a reply's frames): the ranges asked after it start in the
    // wrong place; their replies are dropped above and the range after it is asked for anew.
    if (offset_ + length < total_ && length < kMaxPieceBytes) asked_end_ = offset_ + length;
    while (asked_.size() < kReadWindow && asked_end_ < total_) BM_RETURN_IF_ERROR(Ask());
    // A unit the range holds only part of is checked (and handed out) with the range that
    // completes it.
    frames_ = reply.TakePayloadChunks();
    std::vector<std::span<const std::byte>> pieces;
    pieces.reserve(frames_.size());
    for (const ChunkPtr& frame : frames_) pieces.push_back(frame->bytes());
    if (std::optional<uint64_t> bad = verifier_->Add(offset_, length, pieces, unit_digests)) {
      return bad;
    }
    RecordUnitDigests(offset_, unit_digests);
    offset_ += length;
    return std::optional<uint64_t>();
  }
}

const std::vector<std::span<const std::byte>>& RangeReader::ready() const {
  static const std::vector<std::span<const std::byte>> kNothing;
  return verifier_ ? verifier_->ready() : kNothing;
}

std::vector<ChunkPtr> RangeReader::TakeReadyChunks() {
  // The ready bytes are, in order, those held back from the range before (a copy of less than
  // a unit) and then views of this range's frames.
  std::vector<ChunkPtr> chunks;
  size_t frame = 0;
  for (std::span<const std::byte> bytes : ready()) {
    while (frame < frames_.size() &&
           !(bytes.data() >= frames_[frame]->bytes().data() &&
             bytes.data() < frames_[frame]->bytes().data() + frames_[frame]->size())) {
      ++frame;
    }
    if (frame == frames_.size()) {
      chunks.push_back(
          std::make_shared<VectorChunk>(std::vector<std::byte>(bytes.begin(), bytes.end())));
      frame = 0;
      continue;
    }
    const size_t offset = static_cast<size_t>(bytes.data() - frames_[frame]->bytes().data());
    chunks.push_back(offset == 0 && bytes.size() == frames_[frame]->size()
                         ? frames_[frame]
                         : SliceChunk(frames_[frame], offset, bytes.size()));
  }
  frames_.clear();
  return chunks;
}

void RangeReader::RecordUnitDigests(uint64_t offset, const std::vector<uint64_t>& units) {
  const uint64_t first = offset / kDigestUnitBytes;
  const uint64_t count = DigestUnitCount(total_);
  if (unit_digests_.size() != count) unit_digests_.assign(count, 0);
  for (size_t i = 0; i < units.size() && first + i < count; ++i) {
    unit_digests_[first + i] = units[i];
  }
}

uint64_t RangeReader::SentBlockDigest() const {
  if (unit_digests_.size() != DigestUnitCount(total_) || unit_digests_.empty()) return 0;
  if (std::find(unit_digests_.begin(), unit_digests_.end(), 0) != unit_digests_.end()) return 0;
  return BlockDigestOf(unit_digests_);
}

}  // namespace bm
