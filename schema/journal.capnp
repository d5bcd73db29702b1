@0xd93b6a4e1c7f2a58;
# Values the master keeps in its journal (master/journal.h, RocksDB under --state-dir).
# Block locations are not here: there are millions of them, so their values are a few raw
# bytes (see master/journal.cc). Workers and RDD descriptions are few and worth a schema that
# can grow.

using Cxx = import "/capnp/c++.capnp";
using Messages = import "messages.capnp";
$Cxx.namespace("bm::journal");

# Key "w" + worker id.
struct JournalWorker {
  address @0 :Text;
  host @1 :Text;
  rack @2 :Text;
  # The CURVE public key (Z85) the worker authenticated with when it registered; empty with
  # keys off and in journals written before keys were journaled.
  publicKey @3 :Text;
}

# Key "r" + big-endian RDD id.
struct JournalRdd {
  name @0 :Text;
  level @1 :Messages.StorageLevel;
  totalPartitions @2 :UInt64;
}

# Key "o" + dataset name ("rdd_7", "broadcast_3"): who owns a dataset and with whom it is
# shared (master/tenant_registry.h).
struct JournalDataset {
  owner @0 :Text;
  readers @1 :List(Text);
  generation @2 :UInt64;
}

# Key "q" + tenant name: the tenant's byte quotas (0 = no limit on that tier).
struct JournalQuota {
  memoryBytes @0 :UInt64;
  diskBytes @1 :UInt64;
}

# Key "m" + block id: a block whose last copy was lost (master/lost_blocks.h).
struct JournalLost {
  order @0 :UInt64;   # LostRecord::order: the oldest is forgotten first
  version @1 :UInt64;
  size @2 :UInt64;
  level @3 :Messages.StorageLevel;
  lostAtMs @4 :UInt64;
  cause @5 :Messages.LostCause;
  detail @6 :Text;
  workerId @7 :Text;
}

# Key "s" + big-endian shuffle id: a registered shuffle and where its partitions live
# (master/shuffle_service.h).
struct JournalShuffle {
  maps @0 :UInt32;
  partitions @1 :UInt32;
  level @2 :Messages.StorageLevel;
  workers @3 :List(Text);       # worker ids
  primaries @4 :List(UInt32);   # per partition: index into workers
  replicas @5 :List(UInt32);    # per partition, for _2 levels
  owner @6 :Text;               # the tenant that registered it; empty without tenants
  splits @7 :List(Messages.ShuffleSplit);  # partitions' later streams
}

# Key "s" + big-endian shuffle id + big-endian map id: the map's committed attempt.
struct JournalMapCommit {
  attempt @0 :UInt32;
  pieces @1 :List(Messages.PartitionPieces);
}
