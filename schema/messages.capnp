@0xc4f1a7d2b35e9e01;
# Every message blockmgr sends. A message on the wire is one ZeroMQ multipart message:
#   [routing id, added/removed by ROUTER sockets] [header: one Request or Reply] [payload frames...]
# Block bytes never travel inside a header; they follow it as payload frames of at most
# kMaxPayloadFrameBytes each (see common/core/protocol.h), so they can be sent and kept zero-copy.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("bm::proto");

enum Tier {
  memory @0;
  disk @1;
}

# Spark's storage levels. The _2 forms keep two copies on distinct workers.
enum StorageLevel {
  memoryOnly @0;
  memoryAndDisk @1;
  diskOnly @2;
  memoryOnly2 @3;
  memoryAndDisk2 @4;
  diskOnly2 @5;
}

# Semantic error codes: they tell the caller what to do, not what broke inside.
enum ErrorCode {
  internal @0;         # a bug or an unexpected failure on the server; not retryable
  notFound @1;         # the block, worker or RDD does not exist
  invalidArgument @2;  # malformed request, bad id, bad level
  outOfSpace @3;       # memory budget or disk limit cannot hold the block
  unavailable @4;      # peer unreachable or shutting down; retry later
  unknownWorker @5;    # the master does not know this worker: register again
  aborted @6;          # the operation lost a race (block replaced during a read); retry
  tooLarge @7;         # a frame or message over the protocol's limits
  permissionDenied @8; # the sender's key (its role, its worker id) may not make this request
  dataLoss @9;         # the stored bytes failed their checksum: this copy is never served
}

struct Error {
  code @0 :ErrorCode;
  message @1 :Text;
}

# A block as one worker holds it.
struct BlockStatus {
  blockId @0 :Text;
  tier @1 :Tier;
  size @2 :UInt64;
  level @3 :StorageLevel;
  # Which put wrote this copy: a random non-zero token chosen by the writer of a put and shared
  # by the copies that put made (and by copies made from them later). 0 = unknown (a block
  # stored before versions existed). See PROTOCOL.md, "One version per block id".
  version @4 :UInt64;
  # The block's digest: BlockDigestOf its stored unit digests (common/core/digest.h), the same on
  # every copy of one version. 0 = unknown (stored before digests existed, or from an old
  # worker). See PROTOCOL.md, "Integrity".
  digest @5 :UInt64;
}

# One change a worker reports: the block is now held as `status`, or it is gone.
struct BlockUpdate {
  status @0 :BlockStatus;
  removed @1 :Bool;
  # A put just committed this version here: it replaces every other version of the block in the
  # cluster. False for copies, tier moves and full reports of what a worker already held.
  fresh @2 :Bool;
  # The compute lease the put of a fresh block stored it under (PutBlock.leaseToken); 0 = none.
  leaseToken @3 :UInt64;
  # The quota reservation the master granted the put of this fresh block (AccessReply
  # .reservation); 0 = none. Reporting the block ends it: the block's bytes count instead.
  reservation @4 :UInt64;
}

struct WorkerStats {
  memoryCapacity @0 :UInt64;
  memoryUsed @1 :UInt64;
  diskUsed @2 :UInt64;
  diskCapacity @3 :UInt64;   # 0 = unlimited
  blockCount @4 :UInt64;
  # The worker's disk store took a storage error (a full disk) and stores nothing until it
  # recovers; reads and removals still work. Placement skips it for disk blocks.
  diskReadOnly @5 :Bool;
  # Of memoryUsed: bytes readers on the worker's host keep mapped (same-host reads, pinned).
  memoryPinned @6 :UInt64;
  # Each of the worker's disks (--disk-dir), in flag order; diskUsed and diskCapacity sum the
  # disks that have not failed. Empty from a worker that predates several disks. Readers keep
  # at most kMaxDisksShown of them.
  disks @7 :List(DiskStats);
}

enum DiskState {
  ok @0;
  readOnly @1;   # took a storage error (full): stores nothing until space is freed
  failed @2;     # an I/O error or a hang; its blocks were reported lost, it is used no more
}

struct DiskStats {
  path @0 :Text;
  used @1 :UInt64;
  capacity @2 :UInt64;  # what used could reach now; 0 once failed
  limit @3 :UInt64;     # as configured; 0 = as much as the filesystem has
  state @4 :DiskState;
  reason @5 :Text;      # why it failed
}

# ---- worker -> master ----

struct RegisterWorker {
  workerId @0 :Text;
  address @1 :Text;            # where clients and the master reach this worker's data port
  stats @2 :WorkerStats;
  blocks @3 :List(BlockStatus);  # full block report: everything the worker holds now
  # Placement labels (empty = none). Replicas of a block go to distinct racks first, then
  # distinct hosts, then distinct workers, as HDFS places them.
  host @4 :Text;
  rack @5 :Text;
  # Ids in `blocks` whose put committed here without the master's acknowledgement: they
  # replace other versions as a fresh BlockUpdate does.
  freshBlocks @6 :List(Text);
  # Blocks the worker had committed to disk that did not survive a restart or a storage error
  # (see PROTOCOL.md, "Lost blocks"); the master re-replicates them from other copies at once.
  lostBlocks @7 :List(Text);
  # The same lost blocks with why each was lost (PROTOCOL.md, "Lost blocks"). A worker sends
  # both lists; a master reads this one when it is present, else `lostBlocks` (cause unknown:
  # storageError).
  lostCopies @8 :List(LostCopy);
  # This is the worker process's first registration since it started: blocks the master lists
  # on it that `blocks` lacks did not survive its restart (a master records the ones that were
  # their block's last copy as lost, workerRestarted). False on a registration after the
  # worker lost its master: blocks missing then were removed or evicted meanwhile.
  startedNow @9 :Bool;
  # How many blocks of the full report did not fit in `blocks`: they are the updates of the
  # next reports, first of all (a master judges what the restart lost once they are in).
  followUpBlocks @10 :UInt64;
  # The shuffles this worker holds partitions of (PROTOCOL.md, "Shuffles"), those its disks
  # kept across a restart included: the master tells it to remove the ones it no longer has
  # and which partitions of the others it holds.
  shuffles @11 :List(UInt64);
}

# Why the last copy of a block was lost (common/core/lost_cause.h). Append only.
enum LostCause {
  storageError @0;     # the store failed to keep it (I/O or RocksDB error); also "unknown"
  workerDropped @1;    # its worker stopped heartbeating and was dropped
  copyCorrupt @2;      # the copy failed its checksum
  diskFailed @3;       # the disk holding it failed
  lostAtStartUp @4;    # the worker's start-up check (commit journal, table files) lost it
  workerRestarted @5;  # its worker restarted without it (a memory block)
}

# Worker -> master: one copy the worker lost, and why.
struct LostCopy {
  blockId @0 :Text;
  cause @1 :LostCause;
  detail @2 :Text;     # what the worker saw ("table file 000012.sst is truncated ..."), <= 512 B
  version @3 :UInt64;  # the lost copy's version (BlockStatus.version); 0 = unknown
}

# What the master remembers of a block whose last copy was lost (PROTOCOL.md, "Lost blocks").
struct LostBlockRecord {
  blockId @0 :Text;
  version @1 :UInt64;
  size @2 :UInt64;
  level @3 :StorageLevel;
  lostAtMs @4 :UInt64;   # when the master recorded it: milliseconds since the Unix epoch
  cause @5 :LostCause;
  detail @6 :Text;
  workerId @7 :Text;     # the worker that held the last copy
}

enum WorkerState {
  active @0;
  unconfirmed @1;      # known from the master's journal; has not re-registered since a restart
  decommissioning @2;  # takes no new blocks; its blocks are being copied elsewhere
}

struct RegisterReply {
  heartbeatIntervalMs @0 :UInt32;  # how often the master wants heartbeats
  epoch @1 :UInt64;                # the leader's epoch (0: a master without an election)
}

# High availability (PROTOCOL.md, "Standby masters"). A standby master answers every request
# meant for the leader with this instead of acting on it; the caller goes to `leaderAddress`
# (empty while no leader is known: retry shortly) and retries.
struct NotLeader {
  leaderAddress @0 :Text;
  epoch @1 :UInt64;       # the leader's, as the standby last saw it; 0 = unknown
  leaderId @2 :Text;
}

# Standby -> leader: the journal records after `fromSequence` of epoch `epoch` (0, 0: from the
# start). The leader may hold the request up to `waitMs` for a record to arrive (a long poll).
# A request also confirms to the leader that the standby holds every record before
# `fromSequence`: the leader acknowledges nothing until its in-sync standbys hold it.
struct FetchJournal {
  standbyId @0 :Text;
  epoch @1 :UInt64;
  fromSequence @2 :UInt64;
  waitMs @3 :UInt32;
  # Set while receiving a snapshot in pages: the next page, after this journal key, of the
  # snapshot as of (epoch, fromSequence).
  snapshotAfter @4 :Data;
}

# Answers fetchJournal: RocksDB write batches of the leader's journal, their sizes in
# `batchBytes`, their bytes concatenated and cut into payload frames (a batch may span
# frames). The first has sequence `firstSequence` in epoch `epoch`; the standby's next fetch is
# from firstSequence + len(batchBytes). With `snapshot` (the standby's position was not among
# the leader's recent records) the standby first empties its journal, the batches rebuild the
# leader's journal as of sequence `firstSequence`, and the next fetch is from `firstSequence`.
# A snapshot comes in pages, each a bounded part of the journal in key order read as it is
# then: the first (`snapshotFrom` empty) empties the standby's journal, `snapshotNext` names
# the key the next page follows (empty on the last), and the records from `firstSequence` on,
# fetched after the last page, make the pages consistent (each is a set of puts and deletes,
# so replaying one the pages already show changes nothing).
struct JournalBatches {
  epoch @0 :UInt64;
  firstSequence @1 :UInt64;
  batchBytes @2 :List(UInt64);
  snapshot @3 :Bool;
  # The leader's next sequence when it answered: a standby whose position reaches it held
  # every record the leader had written (it is caught up).
  headSequence @4 :UInt64;
  snapshotFrom @5 :Data;
  snapshotNext @6 :Data;
}

# Answers masterInfo: this master as it sees itself.
struct MasterInfo {
  id @0 :Text;
  address @1 :Text;
  leader @2 :Bool;
  epoch @3 :UInt64;           # the leader's epoch it knows (its own when it leads)
  leaderAddress @4 :Text;
  journalSequence @5 :UInt64; # records written (leader) or applied (standby) in this epoch
  inSync @6 :Bool;            # standby: holds every record the leader acknowledged
}

struct Heartbeat {
  workerId @0 :Text;
  stats @1 :WorkerStats;
}

struct ReportBlocks {
  workerId @0 :Text;
  updates @1 :List(BlockUpdate);
  stats @2 :WorkerStats;
  lostBlocks @3 :List(Text);  # as in RegisterWorker; their removals are among `updates`
  lostCopies @4 :List(LostCopy);  # as in RegisterWorker
}

# ---- client -> master ----

struct GetLocations {
  blockIds @0 :List(Text);
}

struct Location {
  workerId @0 :Text;
  address @1 :Text;
  tier @2 :Tier;
  size @3 :UInt64;
  publicKey @4 :Text;  # the worker's CURVE public key (Z85); empty on an insecure cluster
}

struct BlockLocations {
  blockId @0 :Text;
  level @1 :StorageLevel;
  locations @2 :List(Location);  # empty when no live worker holds the block
  # The block's digest as the master keeps it for the current version (BlockStatus.digest);
  # 0 = unknown. A reader of the whole block checks the unit digests the worker sent against
  # it (PROTOCOL.md, "Integrity").
  digest @3 :UInt64;
  # Set when no copy is left because the last one was lost (and `locations` is then empty):
  # what the master recorded. Unset for a block that was never stored or was removed.
  lost @4 :LostBlockRecord;
}

struct WorkerInfo {
  workerId @0 :Text;
  address @1 :Text;
  stats @2 :WorkerStats;
  lastHeartbeatAgeMs @3 :UInt64;
  host @4 :Text;
  rack @5 :Text;
  state @6 :WorkerState;
  publicKey @7 :Text;  # the worker's CURVE public key (Z85), as the master authenticated it
}

# Client -> master: drain a worker. It stops taking new blocks, every block it holds is copied
# to other workers (keeping its level), and then it is told to shut down. Replies `ok` once
# the drain has started; `listWorkers` shows its progress.
struct DecommissionWorker {
  workerId @0 :Text;
}

# Master -> worker: copy one of your blocks to these workers (at `level`), then answer
# `replicated` with how many copies were made. Used to restore a block's replication after a
# worker died, and to drain a decommissioning worker.
struct ReplicateBlock {
  blockId @0 :Text;
  level @1 :StorageLevel;
  targets @2 :List(ReplicaTarget);
}

struct ReplicaTarget {
  workerId @0 :Text;
  address @1 :Text;
  publicKey @2 :Text;  # the target's CURVE public key (Z85), as the master authenticated it
}

struct ListBlocks {
  union {
    all @0 :Void;
    rddId @1 :UInt64;
    # The blocks whose last copy was lost (master's record, newest last): answered with
    # `lostBlocks`; `after` and `limit` do not apply. An older master answers invalidArgument.
    lost @4 :Void;
  }
  # Paging (PROTOCOL.md, "Listing many blocks"): with `limit` > 0 the master answers
  # `blockPage` with at most that many blocks (it may cap it), the first ids after `after` in id
  # order (empty: from the first). 0: every block in one `blocks` reply.
  after @2 :Text;
  limit @3 :UInt32;
}

struct BlockPage {
  blocks @0 :List(BlockLocations);
  more @1 :Bool;   # blocks after the last one may exist: ask again with `after` = its id
}

# One page of the RDD list (PROTOCOL.md, "Listing many blocks"): RDDs with ids >= `startAt`,
# by id, at most `limit` of them (the master caps it; 0 = its cap).
struct ListRdds {
  startAt @0 :UInt64;
  limit @1 :UInt32;
}

struct RddPage {
  rdds @0 :List(RddInfo);
  more @1 :Bool;   # RDDs after the last one may exist: ask again from its id + 1
}

struct RddInfo {
  rddId @0 :UInt64;
  cachedPartitions @1 :UInt64;
  memoryBytes @2 :UInt64;
  diskBytes @3 :UInt64;
  workers @4 :List(Text);
  name @5 :Text;               # as the dataset registered it; empty when never registered
  level @6 :StorageLevel;      # the registered level, else the level of its blocks
  totalPartitions @7 :UInt64;  # as registered; 0 when unknown
}

# Client -> master: a dataset declares an RDD it persists, so tools can show its name, level
# and how many of its partitions are cached. Registering again replaces the description;
# removing the RDD (removeRdd) forgets it.
struct RegisterRdd {
  rddId @0 :UInt64;
  name @1 :Text;
  level @2 :StorageLevel;
  totalPartitions @3 :UInt64;
}

# ---- tenants and quotas (PROTOCOL.md, "Tenants") ----

# Who may use a dataset ("rdd_N", or a non-RDD block's id), as the master records it.
struct DatasetAccessRecord {
  dataset @0 :Text;
  owner @1 :Text;             # empty: nobody owns it yet
  readers @2 :List(Text);     # tenants it is shared with, read-only
  generation @3 :UInt64;      # grows with every change: keep the highest heard of
  ownerMemoryQuota @4 :UInt64;  # the owner's memory quota (0 = none): its guaranteed share
}

# Worker -> master: may `tenant` use `dataset`? With `claim` (a put), a dataset nobody owns
# becomes the tenant's. With `reserveBytes` > 0 (a put of that many bytes at `level`), the
# master also admits the bytes against the owner's quota and answers with a reservation, or
# refuses with outOfSpace "quota exceeded".
struct CheckAccess {
  dataset @0 :Text;
  tenant @1 :Text;
  claim @2 :Bool;
  reserveBytes @3 :UInt64;
  level @4 :StorageLevel;
  blockId @5 :Text;           # the block being put, for the reservation
  # The put's copies (PutBlock.copies, 0: one) and version: the first copy's question reserves
  # for all of them; the others' (same block and version) take their share of that reservation.
  copies @6 :UInt32;
  version @7 :UInt64;
}

struct AccessReply {
  access @0 :DatasetAccessRecord;
  reservation @1 :UInt64;     # 0: none was asked for or needed (no quota)
}

# Client -> master: share a dataset read-only with a tenant (or with `unshare`, stop).
# Only its owner or an admin key may.
struct ShareDataset {
  dataset @0 :Text;
  tenant @1 :Text;
  unshare @2 :Bool;
}

# Admin -> master: a tenant's byte quotas across the cluster (0 = no limit on that tier), or
# with `remove` none at all.
struct SetQuota {
  tenant @0 :Text;
  memoryBytes @1 :UInt64;
  diskBytes @2 :UInt64;
  remove @3 :Bool;
}

struct TenantInfo {
  tenant @0 :Text;
  memoryBytes @1 :UInt64;       # stored, every copy counted
  diskBytes @2 :UInt64;
  memoryQuota @3 :UInt64;       # 0 = none
  diskQuota @4 :UInt64;
  reservedBytes @5 :UInt64;     # admitted puts not reported yet
  datasets @6 :UInt64;          # owned
}

# ---- compute leases (get-or-compute, see PROTOCOL.md) ----

# Client -> master: "I need this block; if nobody has it, may I compute it?"
# The master answers `cached` when a live worker holds the block (not counting the workers in
# `failedWorkers`, which the client could not read it from), `granted` with a lease token when
# nobody holds it and nobody else is computing it, and otherwise keeps the request for up to
# `waitMs`: it is answered `cached` as soon as the block is stored, `granted` when the holder
# releases its lease or lets it expire, or `busy` when the wait is over.
struct AcquireCompute {
  blockId @0 :Text;
  holder @1 :Text;              # who asks, for logs and `busy` replies (e.g. host:pid)
  leaseMs @2 :UInt32;           # how long a granted lease lasts unless renewed
  waitMs @3 :UInt32;            # how long the master may hold this request
  failedWorkers @4 :List(Text);
}

struct ComputeBusy {
  holder @0 :Text;
  leaseLeftMs @1 :UInt64;       # until the holder's lease expires unless renewed
}

struct ComputeReply {
  union {
    cached @0 :BlockLocations;
    granted @1 :UInt64;         # the lease token
    busy @2 :ComputeBusy;
  }
}

# Client -> master: extends a lease by its leaseMs (reply ok), or fails with `aborted` when the
# lease is no longer held (expired and handed over, or the block was stored meanwhile).
# ReleaseCompute ends a lease early (reply ok, also for a lease no longer held), handing it
# to the next waiter.
struct ComputeLease {
  blockId @0 :Text;
  token @1 :UInt64;
}

# Client -> master: remove these blocks wherever they are.
# Master -> worker and client -> worker: remove these blocks from this worker.
struct RemoveBlocks {
  blockIds @0 :List(Text);
  # Empty, or one entry per id: remove the block only while it is that version (0 = any). The
  # master removes superseded and extra copies this way, so a newer version put here meanwhile
  # is never removed by mistake.
  versions @1 :List(UInt64);
}

struct RemoveRdd {
  rddId @0 :UInt64;
}

# ---- client -> worker (data plane) ----

# One piece of an upload. A block arrives as one or more PutBlock messages with increasing
# offsets, each followed by its bytes as payload frames; the one with `last` set commits it.
# The worker replies to each piece, in order; a client may send the next pieces before the
# replies to the earlier ones arrive (a window: PROTOCOL.md, "Uploads"), and a big block never
# has to sit whole in any one message.
struct PutBlock {
  blockId @0 :Text;
  level @1 :StorageLevel;
  totalSize @2 :UInt64;
  offset @3 :UInt64;
  last @4 :Bool;
  uploadId @5 :UInt64;   # chosen by the client; pieces of one upload share it
  # The version this upload stores (see BlockStatus.version): a fresh random token per put,
  # shared by all its copies. 0 from an old client: the worker picks one.
  version @6 :UInt64;
  # A copy of an existing version (re-replication, draining), not a new put: it never replaces
  # another version of the block.
  replica @7 :Bool;
  # Get-or-compute: the compute lease the client stores its result under (0 = none). The
  # master refuses the block unless that lease is still held (PROTOCOL.md, "Compute leases").
  leaseToken @8 :UInt64;
  # XXH3-64 of this piece's payload bytes (all its frames in order), checked by the worker
  # before it appends them: a mismatch fails the piece with dataLoss ("corrupted in transit")
  # and leaves the upload where it was, so the client sends that piece again. Checked only
  # when `digested` is set (an old client sends no digest).
  pieceDigest @9 :UInt64;
  digested @10 :Bool;
  # XXH3-64 of each digest unit (1 MiB aligned to block offsets, common/core/digest.h) this piece
  # holds, in order; then the piece starts on a unit boundary and ends on one or at the block's
  # end. The worker hashes the bytes once, compares (a mismatch: dataLoss, as for pieceDigest)
  # and stores these as the block's digests. Empty: the worker uses pieceDigest and digests the
  # bytes itself. A piece sent after one refused as corrupted, before the client heard of it,
  # is refused with `aborted` and the upload waits for the resend.
  unitDigests @11 :List(UInt64);
  # The wall time the block took to compute, in microseconds, as the client measured it
  # (get-or-compute: its compute function) or stated it (a put's compute cost); 0 = not stated.
  # Kept with a memory copy, where the cost-aware eviction policy weighs it (README "Eviction").
  # Only the first piece's value counts.
  computeCostUs @12 :UInt64;
  # How many copies this put stores (the client uploads them at once, one version): a tenant's
  # quota admits them together at the first copy's first piece, so a put refused for its quota
  # stores none (PROTOCOL.md, "Tenants"). 0 (an old client, a replica): one. First piece only.
  copies @13 :UInt32;
}

# Client -> worker: the client gave up on this upload (a piece failed elsewhere, its source
# failed, or it fails over to another worker). The worker drops the upload and releases its
# claimed space at once. Best effort: the client does not wait for the reply (`ok`, also for
# an upload the worker does not know), and a worker also drops the uploads of a client whose
# connection closes.
struct AbortPut {
  uploadId @0 :UInt64;
}

struct PutReply {
  tier @0 :Tier;         # where the block landed (meaningful once committed)
  committed @1 :Bool;
}

# Read [offset, offset + maxLength) of a block. The worker may return fewer bytes than asked
# (it bounds the bytes of one reply); the client asks again from where the reply ended.
struct GetBlock {
  blockId @0 :Text;
  offset @1 :UInt64;
  maxLength @2 :UInt64;
}

struct GetReply {
  totalSize @0 :UInt64;
  offset @1 :UInt64;
  length @2 :UInt64;
  # Changes whenever the block is rewritten; a client reading in several replies checks it
  # stays the same so it never stitches together two versions of a block.
  generation @3 :UInt64;
  tier @4 :Tier;
  level @5 :StorageLevel;
  version @6 :UInt64;    # the block's version (BlockStatus.version)
  # The stored XXH3 digests of the digest units (1 MiB aligned to block offsets) this range
  # overlaps, the first being unit offset / 2^20; empty for a block stored without digests.
  # The reader checks every unit wholly inside the range before using its bytes.
  unitDigests @7 :List(UInt64);
}

# Reads several whole blocks in one round trip (a multi-get): what a client asking for many
# small blocks at once sends instead of one getBlock each. At most kMaxPayloadFrames ids.
struct GetBlocks {
  blockIds @0 :List(Text);
}

# One entry of a getBlocks reply, in the order of the request's ids. The bytes of the
# `included` entries follow the header as payload, entry after entry, `totalSize` bytes each,
# back to back: frame boundaries carry no meaning (the worker packs small blocks into shared
# frames, so 16 blocks of 4 KiB cross ZeroMQ as one frame, not 16). A block that does not fit
# the reply's limits (16 MiB and kMaxPayloadFrames frames in all) is `notIncluded`: read it
# with getBlock.
struct MultiGetEntry {
  state @0 :State;
  enum State {
    included @0;
    notFound @1;
    notIncluded @2;
  }
  totalSize @1 :UInt64;
  generation @2 :UInt64;
  tier @3 :Tier;
  # With `included`: the stored digests of every digest unit of the block (PROTOCOL.md,
  # "Integrity: where every byte is checked"); empty for a block stored without them.
  unitDigests @4 :List(UInt64);
}

struct ContainsBlock {
  blockId @0 :Text;
}

# Client -> worker: re-read this worker's copy of a block now and check it against its stored
# digests (and RocksDB's checksums). Sent by a reader whose bytes from this copy did not match
# their digests (`reportedBad`), and by `bmctl verify`. A corrupt copy is dropped and reported
# to the master with the worker's next block changes, so the master restores the replication
# level from a good copy. An intact copy reported bad means the bytes went bad in transit.
struct VerifyBlock {
  blockId @0 :Text;
  reportedBad @1 :Bool;
}

struct VerifyReply {
  state @0 :State;
  enum State {
    intact @0;
    corrupt @1;    # dropped here
    notFound @2;
  }
  tier @1 :Tier;
  digested @2 :Bool;  # false: stored without digests (before they existed), so only RocksDB's
                      # checksums were checked
  message @3 :Text;   # what was wrong, for a corrupt copy
}

# Test-only fault injection (PROTOCOL.md, "Fault injection"): flips one byte of this worker's
# stored copy of a block, on `tier`, at byte `offset` of the block, leaving its stored digests
# as they were, so the copy reads back corrupt exactly as a rotted one would. A worker serves it
# only when started with --enable-fault-injection (otherwise: invalidArgument saying so); with
# keys, only admin keys may send it. Answered `ok` once the byte is flipped.
struct CorruptBlock {
  blockId @0 :Text;
  tier @1 :Tier;
  offset @2 :UInt64;
}

struct ContainsReply {
  present @0 :Bool;
  status @1 :BlockStatus;
}

# ---- shuffles (PROTOCOL.md, "Shuffles") ----
# A shuffle moves every map task's output, cut into one piece per reduce partition, to the
# reducers. Mappers push pieces to the worker the master assigned each partition (and for _2
# levels to a replica on another host); the worker appends them to the partition's stream;
# a reducer reads its partition as one stream of the committed maps' pieces.

# Client -> master: registers a shuffle (idempotent: the same shape again gets the same
# assignment; another shape under the same id is refused). Answered `shuffle`.
struct RegisterShuffle {
  shuffleId @0 :UInt64;
  maps @1 :UInt32;         # map tasks, ids 0 .. maps-1
  partitions @2 :UInt32;   # reduce partitions, ids 0 .. partitions-1
  level @3 :StorageLevel;  # _2 levels keep each partition on two workers
}

# Client -> master: the assignment of a registered shuffle, and (withCommits) the committed
# map attempts with their pieces in `partition`. Answered `shuffle`.
struct GetShuffle {
  shuffleId @0 :UInt64;
  withCommits @1 :Bool;
  partition @2 :UInt32;
}

# How many pieces (and bytes) one map attempt pushed into one stream: a partition's first
# stream has the partition's id; a split continues it in another (ShuffleSplit.stream).
struct PartitionPieces {
  partition @0 :UInt32;   # the stream
  pieces @1 :UInt32;
  bytes @2 :UInt64;
}

# Client -> master: every piece of this map attempt is acknowledged by the workers (both copies
# for _2): it is the map's output from now on. The first attempt to commit wins; a later
# attempt of the same map is refused with `aborted` naming the winner, and its pieces are never
# read. Answered ok.
struct CommitShuffleMap {
  shuffleId @0 :UInt64;
  map @1 :UInt32;
  attempt @2 :UInt32;
  pieces @3 :List(PartitionPieces);  # partitions with no piece are left out
}

# Client -> master: a reader found the pieces of these committed maps gone from `partition` on
# every copy (their worker lost them). Their commits are dropped, so the maps run again as new
# attempts and commit (Spark's FetchFailed). Answered ok.
struct ReportShuffleLoss {
  shuffleId @0 :UInt64;
  partition @1 :UInt32;
  maps @2 :List(UInt32);
}

# A committed map attempt as a reader needs it: which attempt's pieces to take from a partition
# and how many there are (so a reader notices pieces that are gone).
struct MapCommit {
  map @0 :UInt32;
  attempt @1 :UInt32;
  pieces @2 :UInt32;   # in the partition, over all its streams
  bytes @3 :UInt64;
  streams @4 :List(PartitionPieces);  # the same, per stream of the partition (splits)
}

# A partition continued past its split size: stream `stream` (p + k x partitions for
# partition p's k-th split) holds the partition's pieces after the streams before it, on
# workers[primary] (and workers[replica] for _2 levels). Workers hold streams as they hold
# partitions (shuffleAssigned lists stream ids).
struct ShuffleSplit {
  stream @0 :UInt32;
  partition @1 :UInt32;
  primary @2 :UInt32;
  replica @3 :UInt32;
}

# Client -> master: pushes to `stream` of the shuffle were refused as past the split size; the
# partition continues in a new stream on another worker (unless a later one exists already).
# Answered `shuffle`, whose splits name it.
struct SplitShuffle {
  shuffleId @0 :UInt64;
  stream @1 :UInt32;
}

# Worker -> client: a push taken, except the pieces of `full` streams (past the split size),
# which the writer pushes again to the partition's next stream.
struct ShufflePushed {
  full @0 :List(UInt32);
}

# A registered shuffle: where each partition lives. workers[primaries[p]] holds partition p,
# and for _2 levels workers[replicas[p]] holds a second copy (replicas is empty otherwise).
struct ShuffleAssignment {
  shuffleId @0 :UInt64;
  maps @1 :UInt32;
  partitions @2 :UInt32;
  level @3 :StorageLevel;
  workers @4 :List(ReplicaTarget);
  primaries @5 :List(UInt32);
  replicas @6 :List(UInt32);
  # getShuffle withCommits: the committed attempts, by map, with their pieces in the asked
  # partition (maps with none there are listed with pieces 0).
  commits @7 :List(MapCommit);
  committedMaps @8 :UInt32;  # maps committed so far
  splits @9 :List(ShuffleSplit);  # partitions' later streams, in order
}

# One shuffle as `bmctl shuffles` lists it.
struct ShuffleInfo {
  shuffleId @0 :UInt64;
  maps @1 :UInt32;
  partitions @2 :UInt32;
  level @3 :StorageLevel;
  committedMaps @4 :UInt32;
  bytes @5 :UInt64;          # committed bytes, one copy
  workers @6 :List(Text);    # the workers holding its partitions
  idleMs @7 :UInt64;         # since a client last touched it
}

# Master -> worker: the partitions of a shuffle this worker holds (as primary or replica); it
# accepts pushes to those and refuses others. Sent when the shuffle is registered and again
# when the worker registers. Answered ok.
struct ShuffleAssigned {
  shuffleId @0 :UInt64;
  maps @1 :UInt32;
  partitions @2 :List(UInt32);
  owner @3 :Text;   # the tenant that registered it; empty without tenants
  # Its level: with a disk (DISK_ONLY, MEMORY_AND_DISK...) the worker writes pieces to their
  # files soon after they arrive; memory only, when its shuffle memory runs short.
  level @4 :StorageLevel;
  # _2 levels: the streams this worker is the primary of, each with its replica. The primary
  # forwards every push to a stream's replica and acknowledges it once the replica holds it.
  forwards @5 :List(ShuffleForward);
}

struct ShuffleForward {
  stream @0 :UInt32;
  replica @1 :ReplicaTarget;
}

# Names a shuffle: unregisterShuffle (client -> master), removeShuffle (master -> worker: drop
# its data).
struct ShuffleRef {
  shuffleId @0 :UInt64;
}

# One piece pushed: its bytes follow the header as payload, piece after piece, `length` bytes
# each, back to back (frame boundaries carry no meaning, as in getBlocks replies).
struct PushedPiece {
  partition @0 :UInt32;
  sequence @1 :UInt32;  # 0, 1, 2, ... per (map attempt, partition), the same on every copy:
                        # a piece pushed again is recognised and kept once
  length @2 :UInt32;
  digest @3 :UInt64;    # XXH3 of the bytes
  # The first sequence of this (map attempt, partition) the writer sends this worker: 0, or
  # for a worker that took the partition over from a lost one, the first piece the lost one
  # had not acknowledged. Sequences are the writer's, the same on every copy, so a reader can
  # take a map's pieces from either copy; a worker holding nothing of the attempt yet takes
  # `firstSequence` as its next piece (and refuses a later one: one before it was lost).
  firstSequence @4 :UInt32;
}

# Client -> worker: pieces of one map attempt for partitions this worker holds. Answered ok
# once every piece is held (a repeated piece is acknowledged and not kept twice).
struct PushShuffle {
  shuffleId @0 :UInt64;
  map @1 :UInt32;
  attempt @2 :UInt32;
  pieces @3 :List(PushedPiece);
  # Sent by a stream's primary to its replica (ShuffleAssigned.forwards): held, not forwarded
  # again. Only a worker's key may send it when keys are on.
  forwarded @4 :Bool;
}

# Client -> worker: the next pieces of a partition, from `cursor` (0: the start), of the listed
# committed attempts only, up to about maxBytes. Answered `shufflePieces` + payload.
struct ReadShuffle {
  shuffleId @0 :UInt64;
  partition @1 :UInt32;
  commits @2 :List(MapCommit);
  cursor @3 :UInt64;
  maxBytes @4 :UInt32;
}

struct ReadPiece {
  map @0 :UInt32;
  sequence @1 :UInt32;
  length @2 :UInt32;
  digest @3 :UInt64;
}

# The pieces' bytes follow as payload, back to back, as in PushShuffle.
struct ShufflePieces {
  pieces @0 :List(ReadPiece);
  nextCursor @1 :UInt64;
  end @2 :Bool;   # no piece after these (so far)
}

# ---- envelopes ----

struct Request {
  id @0 :UInt64;   # echoed in the reply; lets a client match replies and drop stale ones
  union {
    registerWorker @1 :RegisterWorker;
    heartbeat @2 :Heartbeat;
    reportBlocks @3 :ReportBlocks;
    getLocations @4 :GetLocations;
    listWorkers @5 :Void;
    listBlocks @6 :ListBlocks;
    listRdds @7 :Void;
    removeBlocks @8 :RemoveBlocks;
    removeRdd @9 :RemoveRdd;
    putBlock @10 :PutBlock;
    getBlock @11 :GetBlock;
    containsBlock @12 :ContainsBlock;
    ping @13 :Void;
    registerRdd @14 :RegisterRdd;
    acquireCompute @15 :AcquireCompute;
    renewCompute @16 :ComputeLease;
    releaseCompute @17 :ComputeLease;
    decommissionWorker @18 :DecommissionWorker;
    replicateBlock @19 :ReplicateBlock;
    decommission @20 :Void;   # master -> worker: refuse new blocks from now on
    shutdown @21 :Void;       # master -> worker: drained; answer ok and exit
    getBlocks @22 :GetBlocks;
    abortPut @23 :AbortPut;
    listRddPage @24 :ListRdds;
    verifyBlock @25 :VerifyBlock;
    corruptBlock @26 :CorruptBlock;   # test-only, see CorruptBlock
    fetchJournal @27 :FetchJournal;   # standby master -> leader
    masterInfo @28 :Void;             # answered by leader and standby alike
    # New leader -> each worker its journal lists, once elected: "I lead now (Request.epoch),
    # at this client address": the worker registers with it at once instead of waiting to
    # find its old master silent. Answered ok (or refused by the fence when stale).
    leaderElected @30 :Text;
    # Client -> worker: "may I read your blocks through shared memory?" (README "Same-host
    # reads", schema/local_reads.capnp). Authorized as getBlock is; answered with localReads.
    openLocalReads @31 :Void;
    checkAccess @32 :CheckAccess;              # worker -> master, answered `access`
    datasetAccess @33 :DatasetAccessRecord;    # master -> worker: a record changed; ok
    shareDataset @34 :ShareDataset;            # client -> master; ok
    setQuota @35 :SetQuota;                    # admin -> master; ok
    listTenants @36 :Void;                     # client -> master, answered `tenants`
    registerShuffle @37 :RegisterShuffle;      # client -> master, answered `shuffle`
    getShuffle @38 :GetShuffle;                # client -> master, answered `shuffle`
    commitShuffleMap @39 :CommitShuffleMap;    # client -> master; ok
    unregisterShuffle @40 :ShuffleRef;         # client -> master; ok once removal is sent
    listShuffles @41 :Void;                    # client -> master, answered `shuffles`
    shuffleAssigned @42 :ShuffleAssigned;      # master -> worker; ok
    removeShuffle @43 :ShuffleRef;             # master -> worker; ok
    pushShuffle @44 :PushShuffle;              # client -> worker (+ payload); ok
    readShuffle @45 :ReadShuffle;              # client -> worker, answered `shufflePieces`
    reportShuffleLoss @46 :ReportShuffleLoss;  # client -> master; ok
    splitShuffle @47 :SplitShuffle;            # client -> master, answered `shuffle`
  }
  # Master -> worker commands (and compute leases): the epoch of the master that sent them.
  # A worker refuses a command from an epoch older than the highest it has seen (fencing a
  # deposed leader). 0 = a master without an election.
  epoch @29 :UInt64;
}

# A worker's answer to openLocalReads: where its local-read socket is and a ticket that lets
# the connection on it act as the key that asked (schema/local_reads.capnp, Hello). A client
# uses the socket only when hostId is its own host's identity (common/net/host_identity.h).
struct LocalReadsOffer {
  hostId @0 :Text;
  socketPath @1 :Text;   # empty: local reads are off on this worker
  ticket @2 :Data;       # single use, valid for a few seconds
}

struct Reply {
  id @0 :UInt64;
  union {
    error @1 :Error;
    ok @2 :Void;
    registered @3 :RegisterReply;
    locations @4 :List(BlockLocations);
    workers @5 :List(WorkerInfo);
    blocks @6 :List(BlockLocations);
    rdds @7 :List(RddInfo);
    removed @8 :UInt64;       # number of blocks removed
    put @9 :PutReply;
    get @10 :GetReply;
    contains @11 :ContainsReply;
    compute @12 :ComputeReply;
    replicated @13 :UInt32;   # copies made by a replicateBlock
    blocksRead @14 :List(MultiGetEntry);   # answers getBlocks (+ payload)
    # Answers reportBlocks instead of `ok` when the master refused fresh blocks in it because
    # the compute lease they were stored under is no longer held. The report is acknowledged
    # all the same; the listed copies are being removed from the worker.
    reportRefused @15 :List(BlockStatus);
    blockPage @16 :BlockPage;   # answers listBlocks with a limit
    rddPage @17 :RddPage;       # answers listRddPage
    verified @18 :VerifyReply;  # answers verifyBlock
    notLeader @19 :NotLeader;   # a standby master's answer to a request meant for the leader
    journal @20 :JournalBatches;  # answers fetchJournal (+ payload: the batches)
    master @21 :MasterInfo;     # answers masterInfo
    localReads @22 :LocalReadsOffer;   # answers openLocalReads
    access @23 :AccessReply;           # answers checkAccess
    tenants @24 :List(TenantInfo);     # answers listTenants
    lostBlocks @25 :List(LostBlockRecord);   # answers listBlocks with `lost`
    shuffle @26 :ShuffleAssignment;          # answers registerShuffle, getShuffle
    shuffles @27 :List(ShuffleInfo);         # answers listShuffles
    shufflePieces @28 :ShufflePieces;        # answers readShuffle (+ payload)
    shufflePushed @29 :ShufflePushed;        # answers pushShuffle when streams were full
  }
}
