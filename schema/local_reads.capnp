@0xb409b99390f9f2fb;
# Same-host reads (README "Same-host reads", PROTOCOL.md "Local reads"): the messages a client
# and a worker on one host exchange over the worker's Unix domain socket (SOCK_SEQPACKET: one
# message per packet, each a Cap'n Proto message in flat-array form). A block's bytes do not
# travel here: the worker answers a get with a sealed, read-only memfd passed as SCM_RIGHTS
# ancillary data of the reply packet, which the client maps; only blocks of a few KiB are
# carried inline.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("bm::proto");

using Messages = import "messages.capnp";

struct LocalRequest {
  id @0 :UInt64;   # echoed in the reply
  # With get: a pin this connection holds for the block (a region the reader keeps mapped).
  # When it still holds the block's current version the reply names it again (LocalBlock.reused)
  # and no new region is made: reading a block again costs one round trip, not a new mapping.
  mapped @5 :UInt64;
  # With get and getMany: the reader takes small blocks' bytes after the reply's message, in the
  # packet's trailer (LocalBlock.inTrailer), rather than inside it: the worker then sends them
  # from where they are stored, copied by the kernel alone.
  trailer @6 :Bool;
  # With hello: the reader would take the worker's small-block arena (LocalReply.arenaBytes).
  arena @8 :Bool;
  union {
    # First message of a connection: the ticket openLocalReads handed out over TCP, which
    # gives this connection the key and role that asked for it. Answered ok or an error (then
    # the worker closes the connection).
    hello @1 :Data;
    # A whole block: answered with `block`.
    get @2 :Text;
    # The reader unmapped the region of this pin: the worker stops counting it. Not answered.
    release @3 :UInt64;
    # Several small blocks in one round trip: answered with `blocks`, one entry per id in order,
    # each block's bytes inline. An id not served this way (not stored here: notFound; bigger
    # than 64 KiB, on disk, or past the reply's room: unavailable) is read alone.
    getMany @4 :List(Text);
    # A page of a shuffle stream, asked for as readShuffle over TCP is (PROTOCOL.md
    # "Shuffles"), authorized as it is: answered with `shufflePage`, or an error.
    readShuffle @7 :Messages.ReadShuffle;
    # Blocks this reader copied out of its small-block arena (LocalReply.arenaBytes) since its
    # last report, in order, repeats included: each counts as a read of the block where it is
    # held (its recency, for eviction) and in the worker's metrics. Not answered.
    arenaReads @9 :List(Text);
  }
}

struct LocalEntry {
  union {
    block @0 :LocalBlock;
    error @1 :Messages.Error;
  }
}

struct LocalBlock {
  size @0 :UInt64;
  generation @1 :UInt64;
  tier @2 :Messages.Tier;
  level @3 :Messages.StorageLevel;
  version @4 :UInt64;
  # The stored digests of the block's units (as GetReply.unitDigests, from unit 0) and their
  # block digest; empty / 0 for a block stored without digests.
  unitDigests @5 :List(UInt64);
  # Non-zero: the block came as a region (the packet's one descriptor) pinned under this id
  # until the reader sends release (or closes the connection). Zero: the bytes are `inline`.
  pin @6 :UInt64;
  inline @7 :Data;
  # The reply names the pin the request offered (LocalRequest.mapped): the reader's region of it
  # is the block's current version. No descriptor comes with it.
  reused @8 :Bool;
  # The bytes (`size` of them) are in the packet's trailer, the bytes after the reply's message,
  # from `trailerOffset` on (LocalRequest.trailer); `inline` is then empty.
  inTrailer @9 :Bool;
  trailerOffset @10 :UInt64;
}

# A page of a shuffle stream: the pieces as ShufflePieces lists them, their bytes where `bytes`
# says. Nothing is pinned: memory pieces travel as copies (trailer, region) and written records
# never change, so a mapping stays valid and unchanged after the shuffle is removed (an unlinked
# file's pages live while mapped).
struct LocalShufflePage {
  pieces @0 :List(Messages.ReadPiece);
  nextCursor @1 :UInt64;
  end @2 :Bool;
  bytes @3 :PageBytes;
  # With `file`: where each piece's bytes start in the file, in the order of `pieces`.
  fileOffsets @4 :List(UInt64);
  # More packets of this page follow at once, under the same request id (pieces in memory past
  # one packet's room); nextCursor and end are the last packet's.
  more @5 :Bool;

  enum PageBytes {
    trailer @0;   # back to back in the packet's trailer (pieces in the worker's memory)
    region @1;    # back to back in a sealed memfd, the packet's descriptor (a page too big
                  # for a packet)
    file @2;      # in the partition file, the packet's descriptor (opened read-only), at
                  # fileOffsets
  }
}

struct LocalReply {
  id @0 :UInt64;
  # In the answer to a hello that asked for it (LocalRequest.arena): the packet's descriptor is
  # the small-block arena of the connection's key (common/net/block_arena.h), a file of this
  # many bytes sealed against resizing and new writable mappings, opened read-only. The reader
  # maps it and finds small memory blocks there without asking; a block not there it asks for
  # as before. 0: no arena (off, or not for this key).
  arenaBytes @6 :UInt64;
  union {
    error @1 :Messages.Error;
    ok @2 :Void;
    block @3 :LocalBlock;
    blocks @4 :List(LocalEntry);   # answers getMany
    shufflePage @5 :LocalShufflePage;   # answers readShuffle
  }
}
