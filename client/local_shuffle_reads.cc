#include "client/local_shuffle_reads.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "blockmgr/chunk.h"
#include "client/local_reads.h"
#include "common/core/protocol.h"
#include "common/net/local_socket.h"
#include "common/net/sealed_region.h"
#include "schema/local_reads.capnp.h"

namespace bm {
namespace {

// A file page spans at most this much of its partition file (the worker bounds it by twice the
// page size asked for; anything larger is refused rather than mapped).
constexpr uint64_t kMaxFileSpan = uint64_t{1} << 30;

// Bytes [offset, offset + length) of a partition file, mapped read-only and shared: the page
// cache's pages, no copy. The records a worker wrote never change and the file is only ever
// appended to, so the bytes stay as they are; an unlinked file (its shuffle removed) stays
// readable while mapped.
class MappedFileRange final : public Chunk {
 public:
  // Maps the range of `fd` (borrowed: the mapping keeps the file alive) after checking that the
  // file holds it (a mapping past the end would fault on access).
  static Result<std::shared_ptr<const MappedFileRange>> Map(int fd, uint64_t offset,
                                                            uint64_t length) {
    struct stat file {};
    if (fstat(fd, &file) != 0) {
      return UnavailableError(std::string("local reads: fstat of a partition file: ") +
                              std::strerror(errno));
    }
    if (offset + length > static_cast<uint64_t>(file.st_size)) {
      return UnavailableError("local reads: a page past the end of its partition file");
    }
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t start = offset - offset % page;
    const uint64_t mapped_length = offset + length - start;
    void* mapped =
        mmap(nullptr, mapped_length, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(start));
    if (mapped == MAP_FAILED) {
      return UnavailableError(std::string("local reads: cannot map a partition file: ") +
                              std::strerror(errno));
    }
    return std::shared_ptr<const MappedFileRange>(new MappedFileRange(
        static_cast<std::byte*>(mapped), mapped_length, offset - start, length));
  }
  ~MappedFileRange() override { munmap(mapping_, mapping_length_); }
  MappedFileRange(const MappedFileRange&) = delete;
  MappedFileRange& operator=(const MappedFileRange&) = delete;

  // The range mapped, from its offset in the file.
  std::span<const std::byte> bytes() const override { return {mapping_ + skip_, length_}; }

 private:
  MappedFileRange(std::byte* mapping, uint64_t mapping_length, uint64_t skip, uint64_t length)
      : mapping_(mapping), mapping_length_(mapping_length), skip_(skip), length_(length) {}

  std::byte* const mapping_;
  const uint64_t mapping_length_;
  const uint64_t skip_;  // from the page boundary the mapping starts at to the range
  const uint64_t length_;
};

// One page as received: the pieces with their bytes, which `holder` keeps valid.
struct ReceivedPage {
  std::vector<std::pair<ShufflePieceHeader, std::span<const std::byte>>> pieces;
  uint64_t next_cursor = 0;
  bool end = false;
  bool more = false;  // more packets of the page follow
  ChunkPtr holder;    // the packet's trailer, the mapped region or the mapped file range
};

// The pieces' bytes back to back in `bytes` (the trailer or a region).
Status Consecutive(capnp::List<proto::ReadPiece>::Reader listed, std::span<const std::byte> bytes,
                   ReceivedPage& page) {
  uint64_t at = 0;
  for (proto::ReadPiece::Reader piece : listed) {
    if (piece.getLength() > bytes.size() - at) {
      return UnavailableError("local reads: a shuffle page is short of its pieces");
    }
    page.pieces.push_back({{piece.getMap(), piece.getSequence(), piece.getDigest()},
                           bytes.subspan(at, piece.getLength())});
    at += piece.getLength();
  }
  return Status::Ok();
}

// The pieces at their offsets in the partition file `fd`, mapped.
Status InFile(capnp::List<proto::ReadPiece>::Reader listed, capnp::List<uint64_t>::Reader offsets,
              int fd, ReceivedPage& page) {
  if (offsets.size() != listed.size()) {
    return UnavailableError("local reads: a file page without each piece's offset");
  }
  if (listed.size() == 0) return Status::Ok();
  uint64_t first = UINT64_MAX;
  uint64_t end = 0;
  for (unsigned i = 0; i < listed.size(); ++i) {
    if (offsets[i] > UINT64_MAX - listed[i].getLength()) {
      return UnavailableError("local reads: a piece past any file's end");
    }
    first = std::min(first, offsets[i]);
    end = std::max(end, offsets[i] + listed[i].getLength());
  }
  if (end - first > kMaxFileSpan) {
    return UnavailableError("local reads: a file page spans " + std::to_string(end - first) +
                            " bytes");
  }
  BM_ASSIGN_OR_RETURN(std::shared_ptr<const MappedFileRange> range,
                      MappedFileRange::Map(fd, first, end - first));
  const std::span<const std::byte> bytes = range->bytes();
  for (unsigned i = 0; i < listed.size(); ++i) {
    page.pieces.push_back({{listed[i].getMap(), listed[i].getSequence(), listed[i].getDigest()},
                           bytes.subspan(offsets[i] - first, listed[i].getLength())});
  }
  page.holder = std::move(range);
  return Status::Ok();
}

Result<ReceivedPage> ParsePage(LocalPacket& packet) {
  using Bytes = proto::LocalShufflePage::PageBytes;
  try {
    capnp::FlatArrayMessageReader message(packet.words);
    proto::LocalReply::Reader reply = message.getRoot<proto::LocalReply>();
    if (reply.isError()) return StatusFromError(reply.getError());
    if (!reply.isShufflePage()) return UnavailableError("local reads: unexpected reply");
    proto::LocalShufflePage::Reader found = reply.getShufflePage();
    ReceivedPage page;
    page.next_cursor = found.getNextCursor();
    page.end = found.getEnd();
    page.more = found.getMore();
    capnp::List<proto::ReadPiece>::Reader listed = found.getPieces();
    page.pieces.reserve(listed.size());
    switch (found.getBytes()) {
      case Bytes::TRAILER: {
        page.holder = packet.trailer;
        const std::span<const std::byte> bytes =
            packet.trailer ? packet.trailer->bytes() : std::span<const std::byte>();
        BM_RETURN_IF_ERROR(Consecutive(listed, bytes, page));
        return page;
      }
      case Bytes::REGION: {
        if (!packet.fd.valid()) return UnavailableError("local reads: a region without its fd");
        uint64_t total = 0;
        for (proto::ReadPiece::Reader piece : listed) total += piece.getLength();
        BM_ASSIGN_OR_RETURN(page.holder, MappedRegion::Map(packet.fd.Release(), total, {}));
        BM_RETURN_IF_ERROR(Consecutive(listed, page.holder->bytes(), page));
        return page;
      }
      case Bytes::FILE: {
        if (!packet.fd.valid()) return UnavailableError("local reads: a file without its fd");
        // The mapping keeps the file; its descriptor closes with the packet.
        BM_RETURN_IF_ERROR(InFile(listed, found.getFileOffsets(), packet.fd.get(), page));
        return page;
      }
    }
    return UnavailableError("local reads: a shuffle page of an unknown kind");
  } catch (const kj::Exception& e) {
    return UnavailableError(std::string("local reads: malformed shuffle page: ") +
                            e.getDescription().cStr());
  }
}

}  // namespace

void ShuffleStreamAsk::Fill(proto::ReadShuffle::Builder read, uint64_t cursor) const {
  read.setShuffleId(shuffle_id);
  read.setPartition(stream);
  read.setCursor(cursor);
  read.setMaxBytes(max_bytes);
  auto listed = read.initCommits(static_cast<unsigned>(commits.size()));
  for (unsigned i = 0; i < commits.size(); ++i) {
    listed[i].setMap(commits[i].first);
    listed[i].setAttempt(commits[i].second);
  }
}

Status ReadShuffleStreamLocally(LocalReadConnection& connection, const ShuffleStreamAsk& ask,
                                const ShufflePieceSink& sink) {
  auto ask_for = [&](uint64_t cursor) -> Result<uint64_t> {
    capnp::MallocMessageBuilder message;
    ask.Fill(message.initRoot<proto::LocalRequest>().initReadShuffle(), cursor);
    return connection.Ask(message);
  };
  // A page asked ahead and not read (the sink stopped, an error) is still awaited, so its reply
  // (and any descriptor with it) is not left behind on the connection. Request ids start at 1.
  uint64_t ahead = 0;
  struct AwaitAhead {
    LocalReadConnection& connection;
    uint64_t& id;
    ~AwaitAhead() {
      if (id != 0) (void)connection.AwaitReply(id);
    }
  } await_ahead{connection, ahead};
  BM_ASSIGN_OR_RETURN(ahead, ask_for(0));
  for (;;) {
    const uint64_t awaited = std::exchange(ahead, 0);
    // A page of pieces in memory may come as several packets, all sent at once.
    std::vector<ReceivedPage> parts;
    do {
      BM_ASSIGN_OR_RETURN(LocalPacket packet, connection.AwaitReply(awaited));
      BM_ASSIGN_OR_RETURN(ReceivedPage part, ParsePage(packet));
      parts.push_back(std::move(part));
    } while (parts.back().more);
    const ReceivedPage& last = parts.back();
    if (!last.end) {
      BM_ASSIGN_OR_RETURN(ahead, ask_for(last.next_cursor));
    }
    for (const ReceivedPage& part : parts) {
      for (const auto& [piece, bytes] : part.pieces) BM_RETURN_IF_ERROR(sink(piece, bytes));
    }
    if (last.end) return Status::Ok();
  }
}

}  // namespace bm
