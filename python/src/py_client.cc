#include "py_client.h"

#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <thread>

#include "blockmgr/client.h"
#include "buffers.h"
#include "common/core/mutex.h"
#include "errors.h"

namespace bm::python {
namespace py = pybind11;

namespace {

using std::chrono::milliseconds;

BlockId ToBlockId(const py::handle& id) {
  if (py::isinstance<py::str>(id)) {
    Result<BlockId> parsed = BlockId::Parse(id.cast<std::string>());
    ThrowIfError(parsed.status());
    return *parsed;
  }
  if (py::isinstance<py::tuple>(id) && py::len(id) == 2) {
    py::tuple pair = py::reinterpret_borrow<py::tuple>(id);
    const auto rdd = pair[0].cast<int64_t>();
    const auto partition = pair[1].cast<int64_t>();
    if (rdd < 0 || partition < 0) ThrowIfError(InvalidArgumentError("block ids are not negative"));
    return BlockId::Rdd(static_cast<uint64_t>(rdd), static_cast<uint64_t>(partition));
  }
  throw py::type_error("a block id is a string such as 'rdd_7_3' or an (rdd, partition) tuple");
}

std::vector<BlockId> ToBlockIds(const py::iterable& ids) {
  std::vector<BlockId> out;
  for (py::handle id : ids) out.push_back(ToBlockId(id));
  return out;
}

StorageLevel ToLevel(const std::string& level) {
  Result<StorageLevel> parsed = ParseStorageLevel(level);
  ThrowIfError(parsed.status());
  return *parsed;
}

milliseconds ToMillis(double seconds, const char* what) {
  if (!(seconds > 0))
    throw py::value_error(std::string(what) + " must be a positive number of seconds");
  return milliseconds(static_cast<int64_t>(seconds * 1000.0 + 0.5));
}

constexpr int kReadRetries = 3;

bool IsRetriable(StatusCode code) {
  return code == StatusCode::kAborted || code == StatusCode::kUnavailable ||
         code == StatusCode::kNotFound;
}

// Owns the bm::Client and makes Python threads take turns with it. Every call releases the GIL
// before it waits for its turn and for the network.
class PyClient {
 public:
  explicit PyClient(ClientOptions options)
      : client_(std::make_unique<Client>(std::move(options))) {}
  // Closing a client stops its ZeroMQ context, whose I/O threads may need the GIL to release
  // the buffers of a put they still hold (buffers.h): it must not wait with the GIL held.
  ~PyClient() { Close(); }
  PyClient(const PyClient&) = delete;
  PyClient& operator=(const PyClient&) = delete;

  void Close() {
    std::unique_ptr<Client> client;
    {
      py::gil_scoped_release release;
      MutexLock lock(mutex_);
      client = std::move(client_);
      client.reset();
    }
  }

  // Runs `call(client)` with the GIL released and this client to itself. Needs the GIL.
  template <typename Call>
  auto Run(Call&& call) {
    if (computing_thread_.load() == std::this_thread::get_id()) {
      throw py::value_error(
          "a Client cannot be used inside its own get_or_compute function; use another Client");
    }
    py::gil_scoped_release release;
    MutexLock lock(mutex_);
    if (!client_) {
      py::gil_scoped_acquire gil;
      ThrowIfError(InvalidArgumentError("the client is closed"));
    }
    return call(*client_);
  }

  py::object Put(const py::handle& id, const py::handle& data, const std::string& level,
                 std::optional<std::string> worker, uint32_t replication,
                 std::optional<double> compute_cost) {
    const BlockId block = ToBlockId(id);
    const StorageLevel storage_level = ToLevel(level);
    PutOptions options;
    options.worker_id = std::move(worker);
    options.replication = replication;
    if (compute_cost) {
      if (!(*compute_cost >= 0 && *compute_cost < 1e9)) {
        throw py::value_error("compute_cost must be a number of seconds >= 0");
      }
      options.compute_cost =
          std::chrono::microseconds(static_cast<int64_t>(*compute_cost * 1e6 + 0.5));
    }
    BlockData bytes = BorrowBytes(data);
    Result<PutResult> put = Run([&](Client& client) {
      Result<PutResult> result = client.PutChunks(block, bytes, storage_level, options);
      // Our references to the borrowed chunk go without the GIL; ZeroMQ may still hold some.
      bytes.chunks.clear();
      return result;
    });
    ThrowIfError(put.status());
    return py::cast(*put);
  }

  // From a worker on this host: the worker's shared region of the block, mapped read-only (no
  // copy at all). Otherwise received into a pooled region (byte_region.h): one copy out of the
  // received frames, into memory that is usually faulted in already.
  py::object Get(const py::handle& id) {
    const BlockId block = ToBlockId(id);
    std::optional<BlockData> mapped = Run([&](Client& client) { return client.GetMapped(block); });
    if (mapped.has_value() && mapped->chunks.size() == 1) {
      return MakeBlockBuffer(std::move(mapped->chunks.front()));
    }
    if (mapped.has_value()) return MakeBlockBuffer(mapped->Flatten());
    std::unique_ptr<ByteRegion> region = regions_->Take();
    Result<uint64_t> size = Run([&](Client& client) {
      ByteSink sink = [&region](std::span<const std::byte> bytes) {
        return region->Append(bytes) ? Status::Ok()
                                     : OutOfSpaceError("cannot map memory for the block");
      };
      // GetTo falls over to other copies only until the first byte arrived; a read that
      // failed later (the block replaced, its worker gone) starts over, as Client::Get does.
      Result<uint64_t> read = client.GetTo(block, sink);
      for (int retry = 0; retry < kReadRetries && !read.ok() && region->size() > 0 &&
                          IsRetriable(read.status().code());
           ++retry) {
        region->Clear();
        read = client.GetTo(block, sink);
      }
      return read;
    });
    if (!size.ok()) {
      regions_->Give(std::move(region));
      ThrowIfError(size.status());
    }
    return MakeBlockBuffer(std::move(region), regions_);
  }

  py::list GetMany(const py::iterable& ids) {
    const std::vector<BlockId> blocks = ToBlockIds(ids);
    std::vector<Result<std::vector<std::byte>>> data =
        Run([&](Client& client) { return client.GetMany(blocks); });
    py::list out;
    for (Result<std::vector<std::byte>>& one : data) {
      if (one.ok()) {
        out.append(MakeBlockBuffer(std::move(*one)));
      } else if (one.status().code() == StatusCode::kNotFound) {
        out.append(py::none());
      } else {
        ThrowIfError(one.status());
      }
    }
    return out;
  }

  py::object GetOrCompute(const py::handle& id, const std::string& level, const py::function& fn) {
    const BlockId block = ToBlockId(id);
    const StorageLevel storage_level = ToLevel(level);
    // What the function raised, re-raised here once the call is over (it is created and
    // destroyed with the GIL held).
    std::optional<py::error_already_set> raised;
    ComputeFn compute = [&]() -> Result<std::vector<std::byte>> {
      py::gil_scoped_acquire gil;
      computing_thread_.store(std::this_thread::get_id());
      struct Reset {
        std::atomic<std::thread::id>& id;
        ~Reset() { id.store(std::thread::id()); }
      } reset{computing_thread_};
      try {
        return GatherBytes(fn());
      } catch (py::error_already_set& e) {
        raised.emplace(std::move(e));
      } catch (py::builtin_exception& e) {
        e.set_error();
        raised.emplace();
      }
      return InternalError("the compute function of " + block.ToString() + " raised " +
                           std::string(py::str(raised->type().attr("__name__"))));
    };
    Result<std::vector<std::byte>> data =
        Run([&](Client& client) { return client.GetOrCompute(block, storage_level, compute); });
    if (raised) throw *raised;
    ThrowIfError(data.status());
    return MakeBlockBuffer(std::move(*data));
  }

 private:
  Mutex mutex_;
  std::unique_ptr<Client> client_ BM_GUARDED_BY(mutex_);  // null once closed
  // Where gets receive blocks. Shared with the Buffers they returned, which may outlive this.
  std::shared_ptr<RegionPool> regions_ = std::make_shared<RegionPool>();
  // The thread running a get_or_compute function of this client, which must not call it again
  // (it would wait for itself).
  std::atomic<std::thread::id> computing_thread_{};
};

std::string TierString(Tier tier) { return std::string(TierName(tier)); }
std::string LevelString(StorageLevel level) { return std::string(StorageLevelName(level)); }

void RegisterResultTypes(py::module_& m) {
  py::class_<PutResult>(m, "PutResult", "Where a put stored the block.")
      .def_readonly("worker_id", &PutResult::worker_id, "The worker holding the first copy.")
      .def_readonly("address", &PutResult::address)
      .def_property_readonly(
          "tier", [](const PutResult& r) { return TierString(r.tier); }, "'memory' or 'disk'.")
      .def_readonly("size", &PutResult::size)
      .def_readonly("replicas", &PutResult::replicas, "Every worker holding a copy, first first.")
      .def_readonly("copies_wanted", &PutResult::copies_wanted)
      .def("__repr__", [](const PutResult& r) {
        return "PutResult(worker_id='" + r.worker_id + "', tier='" + TierString(r.tier) +
               "', size=" + std::to_string(r.size) +
               ", copies=" + std::to_string(r.replicas.size()) + "/" +
               std::to_string(r.copies_wanted) + ")";
      });

  py::class_<WorkerInfo>(m, "WorkerInfo", "A live worker as the master last heard of it.")
      .def_readonly("id", &WorkerInfo::id)
      .def_readonly("address", &WorkerInfo::address)
      .def_readonly("memory_capacity", &WorkerInfo::memory_capacity)
      .def_readonly("memory_used", &WorkerInfo::memory_used)
      .def_property_readonly("memory_free", &WorkerInfo::memory_free)
      .def_readonly("disk_used", &WorkerInfo::disk_used)
      .def_readonly("disk_capacity", &WorkerInfo::disk_capacity, "0 = unlimited.")
      .def_readonly("block_count", &WorkerInfo::block_count)
      .def_readonly("last_heartbeat_age_ms", &WorkerInfo::last_heartbeat_age_ms)
      .def_readonly("host", &WorkerInfo::host)
      .def_readonly("rack", &WorkerInfo::rack)
      .def_property_readonly(
          "state", [](const WorkerInfo& w) { return std::string(WorkerStateName(w.state)); },
          "'active', 'unconfirmed' or 'decommissioning'.")
      .def("__repr__", [](const WorkerInfo& w) {
        return "WorkerInfo(id='" + w.id + "', address='" + w.address +
               "', blocks=" + std::to_string(w.block_count) + ", state='" +
               WorkerStateName(w.state) + "')";
      });

  py::class_<BlockLocation>(m, "BlockLocation", "One copy of a block.")
      .def_readonly("worker_id", &BlockLocation::worker_id)
      .def_readonly("address", &BlockLocation::address)
      .def_property_readonly("tier", [](const BlockLocation& l) { return TierString(l.tier); })
      .def_readonly("size", &BlockLocation::size)
      .def("__repr__", [](const BlockLocation& l) {
        return "BlockLocation(worker_id='" + l.worker_id + "', tier='" + TierString(l.tier) +
               "', size=" + std::to_string(l.size) + ")";
      });

  py::class_<BlockLocations>(m, "BlockLocations",
                             "Where a block is stored; no locations when no live worker has it.")
      .def_property_readonly("block", [](const BlockLocations& b) { return b.block.ToString(); })
      .def_property_readonly("level", [](const BlockLocations& b) { return LevelString(b.level); })
      .def_readonly("locations", &BlockLocations::locations, "Memory copies first.")
      .def("__repr__", [](const BlockLocations& b) {
        return "BlockLocations(block='" + b.block.ToString() + "', level='" + LevelString(b.level) +
               "', copies=" + std::to_string(b.locations.size()) + ")";
      });

  py::class_<RddInfo>(m, "RddInfo", "A cached RDD, summed over its blocks.")
      .def_readonly("rdd_id", &RddInfo::rdd_id)
      .def_readonly("name", &RddInfo::name)
      .def_property_readonly("level", [](const RddInfo& r) { return LevelString(r.level); })
      .def_readonly("total_partitions", &RddInfo::total_partitions, "0 = not registered.")
      .def_readonly("cached_partitions", &RddInfo::cached_partitions)
      .def_readonly("memory_bytes", &RddInfo::memory_bytes)
      .def_readonly("disk_bytes", &RddInfo::disk_bytes)
      .def_readonly("workers", &RddInfo::workers)
      .def("__repr__", [](const RddInfo& r) {
        return "RddInfo(rdd_id=" + std::to_string(r.rdd_id) + ", name='" + r.name +
               "', cached=" + std::to_string(r.cached_partitions) + "/" +
               std::to_string(r.total_partitions) + ")";
      });

  py::class_<CacheCounters>(m, "CacheCounters", "What a client's get_or_compute calls did.")
      .def_readonly("local_hits", &CacheCounters::local_hits)
      .def_readonly("remote_hits", &CacheCounters::remote_hits)
      .def_property_readonly("hits", &CacheCounters::hits)
      .def_readonly("misses", &CacheCounters::misses)
      .def_readonly("computes", &CacheCounters::computes)
      .def_readonly("waits", &CacheCounters::waits)
      .def_readonly("bytes_fetched", &CacheCounters::bytes_fetched)
      .def_readonly("store_failures", &CacheCounters::store_failures)
      .def("__repr__", [](const CacheCounters& c) {
        return "CacheCounters(hits=" + std::to_string(c.hits()) +
               ", misses=" + std::to_string(c.misses) + ", computes=" + std::to_string(c.computes) +
               ", waits=" + std::to_string(c.waits) + ")";
      });
}

// Client(master="", *, timeout, ...): the options, with the environment's master or ZooKeeper
// when not given (as bmctl takes them).
std::unique_ptr<PyClient> NewClient(std::string master, double timeout, double compute_lease,
                                    double compute_wait, std::string holder_name,
                                    std::vector<std::string> local_hosts, std::string zookeeper,
                                    double leader_wait, bool local_reads) {
  auto from_env = [](std::string& value, const char* name) {
    if (const char* set = std::getenv(name); value.empty() && set != nullptr) value = set;
  };
  from_env(master, "BLOCKMGR_MASTER");
  from_env(zookeeper, "BLOCKMGR_ZOOKEEPER");
  if (master.empty() && zookeeper.empty()) {
    throw py::value_error(
        "give master (tcp://HOST:PORT, or several comma-separated) or zookeeper "
        "(HOST:PORT[/CHROOT]), or set BLOCKMGR_MASTER or BLOCKMGR_ZOOKEEPER");
  }
  ClientOptions options;
  options.master_address = std::move(master);
  options.zookeeper = std::move(zookeeper);
  options.leader_wait = ToMillis(leader_wait, "leader_wait");
  options.request_timeout = ToMillis(timeout, "timeout");
  options.compute_lease = ToMillis(compute_lease, "compute_lease");
  options.compute_wait = ToMillis(compute_wait, "compute_wait");
  options.holder_name = std::move(holder_name);
  options.local_hosts = std::move(local_hosts);
  options.local_reads = local_reads;
  return std::make_unique<PyClient>(std::move(options));
}

// A map attempt's writer (blockmgr/shuffle.h) on a PyClient, whose lock every call takes. The
// Python object keeps its client alive; once the client is closed, calls raise.
class PyShuffleWriter {
 public:
  PyShuffleWriter(PyClient& client, std::unique_ptr<ShuffleWriter> writer)
      : client_(client), writer_(std::move(writer)) {}

  void Write(uint32_t partition, const py::handle& data) {
    BlockData bytes = BorrowBytes(data);
    Status status = client_.Run([&](Client&) {
      Status written;
      for (const ChunkPtr& chunk : bytes.chunks) {
        written = writer_->Write(partition, chunk->bytes());
        if (!written.ok()) break;
      }
      bytes.chunks.clear();  // Write copied the bytes
      return written;
    });
    ThrowIfError(status);
  }
  void Flush() {
    ThrowIfError(client_.Run([&](Client&) { return writer_->Flush(); }));
  }
  void Commit() {
    ThrowIfError(client_.Run([&](Client&) { return writer_->Commit(); }));
  }
  uint64_t bytes_written() const { return writer_->bytes_written(); }

 private:
  PyClient& client_;
  std::unique_ptr<ShuffleWriter> writer_;
};

// A partition's reader: each committed piece handed to a Python function as a read-only
// memoryview of the received bytes (no copy), valid during the call only.
class PyShuffleReader {
 public:
  PyShuffleReader(PyClient& client, std::unique_ptr<ShuffleReader> reader)
      : client_(client), reader_(std::move(reader)) {}

  void ForEach(const py::function& fn) {
    std::optional<py::error_already_set> raised;
    Status status = client_.Run([&](Client&) {
      return reader_->ForEach([&](uint32_t map, std::span<const std::byte> bytes) -> Status {
        py::gil_scoped_acquire gil;
        py::memoryview view = py::memoryview::from_memory(static_cast<const void*>(bytes.data()),
                                                          static_cast<py::ssize_t>(bytes.size()));
        try {
          fn(map, view);
        } catch (py::error_already_set& e) {
          raised.emplace(std::move(e));
        }
        // The bytes go with the reply that carried them: a view kept past the call raises.
        view.attr("release")();
        return raised ? InternalError("the function raised") : Status::Ok();
      });
    });
    if (raised) throw *raised;
    ThrowIfError(status);
  }

  py::object ReadAll() {
    Result<std::vector<std::byte>> all = client_.Run([&](Client&) { return reader_->ReadAll(); });
    ThrowIfError(all.status());
    return MakeBlockBuffer(std::move(*all));
  }
  std::vector<uint32_t> missing_maps() const { return reader_->missing_maps(); }
  uint64_t bytes_read() const { return reader_->bytes_read(); }

 private:
  PyClient& client_;
  std::unique_ptr<ShuffleReader> reader_;
};

py::dict LayoutToDict(const ShuffleLayout& layout) {
  py::list workers;
  for (const ShuffleWorker& worker : layout.workers) {
    workers.append(
        py::dict(py::arg("worker_id") = worker.worker_id, py::arg("address") = worker.address));
  }
  return py::dict(py::arg("shuffle_id") = layout.spec.id, py::arg("maps") = layout.spec.maps,
                  py::arg("partitions") = layout.spec.partitions,
                  py::arg("level") = std::string(StorageLevelName(layout.spec.level)),
                  py::arg("workers") = workers, py::arg("primaries") = layout.primaries,
                  py::arg("replicas") = layout.replicas,
                  py::arg("committed_maps") = layout.committed_maps);
}

void RegisterShuffles(py::module_& m) {
  py::class_<PyShuffleWriter>(m, "ShuffleWriter", R"doc(
Writes one attempt of one map task of a shuffle (Client.shuffle_writer): ``write`` each
partition's bytes (as often as wanted), then ``commit``. Nothing of the attempt is read before
it commits; after, exactly its bytes are the map's output.
)doc")
      .def("write", &PyShuffleWriter::Write, py::arg("partition"), py::arg("data"),
           "Appends ``data`` (any bytes-like object, copied) to the partition.")
      .def("flush", &PyShuffleWriter::Flush, "Pushes what is buffered and awaits every ack.")
      .def("commit", &PyShuffleWriter::Commit, R"doc(
Flushes, then records the attempt as the map's output. Raises Aborted when another attempt of
the map committed first.
)doc")
      .def_property_readonly("bytes_written", &PyShuffleWriter::bytes_written);
  py::class_<PyShuffleReader>(m, "ShuffleReader", R"doc(
Reads one reduce partition's committed output (Client.shuffle_reader).
)doc")
      .def("for_each", &PyShuffleReader::ForEach, py::arg("fn"), R"doc(
Calls ``fn(map_id, view)`` for every piece, ``view`` a read-only memoryview of the received
bytes (no copy), valid during the call only. Raises DataLoss when committed maps' pieces are
gone from every copy; ``missing_maps`` then names the maps to run again.
)doc")
      .def("read_all", &PyShuffleReader::ReadAll, "Every piece's bytes, concatenated, as a Buffer.")
      .def_property_readonly("missing_maps", &PyShuffleReader::missing_maps)
      .def_property_readonly("bytes_read", &PyShuffleReader::bytes_read);
}

}  // namespace

void RegisterClient(py::module_& m) {
  RegisterResultTypes(m);
  RegisterShuffles(m);

  py::class_<PyClient>(m, "Client", R"doc(
A connection to a blockmgr cluster (a bm-master and its workers).

Block ids are strings such as ``"rdd_7_3"``, ``"broadcast_4"``, ``"shuffle_1_2_3"`` or
``(rdd_id, partition)`` tuples; levels are Spark's names (``"MEMORY_AND_DISK_2"``).
Failures raise subclasses of :class:`blockmgr.Error`. Calls release the GIL while they wait on
the network; calls from several threads on one Client take turns, so give each thread that
should overlap its calls a Client of its own. A Client is not shared across ``fork()``.
)doc")
      .def(py::init(&NewClient), py::arg("master") = "", py::kw_only(), py::arg("timeout") = 5.0,
           py::arg("compute_lease") = 5.0, py::arg("compute_wait") = 2.0,
           py::arg("holder_name") = "", py::arg("local_hosts") = std::vector<std::string>{},
           py::arg("zookeeper") = "", py::arg("leader_wait") = 10.0, py::arg("local_reads") = true,
           R"doc(
Connects (lazily, on the first call) to the master at ``master`` ("tcp://HOST:PORT"), or to
the leader among several ("tcp://a:7700,tcp://b:7700", standby masters), following it when it
changes. Default: ``$BLOCKMGR_MASTER``.

zookeeper: "HOST:PORT[,HOST:PORT...][/CHROOT]" of the ZooKeeper the masters are elected
    through, instead of (or with) ``master``: calls go to the leader it names. Default:
    ``$BLOCKMGR_ZOOKEEPER``.
leader_wait: with several masters or ZooKeeper, seconds one call may wait for a leader (while
    the masters fail over) before raising Unavailable.

timeout: seconds to wait for each reply before raising Unavailable.
compute_lease: seconds a get_or_compute lease lasts without renewal (it is renewed while the
    function runs), bounding how long a client that died while computing blocks the others.
compute_wait: seconds the master holds a waiter before it asks again.
holder_name: names this client in leases; default "<hostname>:<pid>".
local_reads: map blocks held by a worker on this host from shared memory (``get`` then
    returns a read-only view of the worker's pages, no copy); False reads everything over TCP.
local_hosts: host names that count as this machine's; default detected.
)doc")
      .def("put", &PyClient::Put, py::arg("id"), py::arg("data"),
           py::arg("level") = "MEMORY_AND_DISK", py::kw_only(), py::arg("worker") = py::none(),
           py::arg("replication") = 0, py::arg("compute_cost") = py::none(), R"doc(
Stores ``data`` (bytes, bytearray, memoryview, a NumPy array: any C-contiguous buffer, sent
without a copy) as block ``id`` at ``level``, replacing an earlier block of that id. Returns a
PutResult once every copy is stored. ``worker`` places it on that worker; ``replication``
overrides the level's copy count. ``compute_cost``: seconds the block took to compute, which a
worker evicting by cost weighs (docs/eviction.md "Eviction"; ``get_or_compute`` measures it itself).
)doc")
      .def("get", &PyClient::Get, py::arg("id"), R"doc(
Block ``id`` as a read-only :class:`blockmgr.Buffer` (``numpy.frombuffer`` and ``memoryview``
read it without a copy). Raises NotFound when no live worker holds it.
)doc")
      .def("get_many", &PyClient::GetMany, py::arg("ids"), R"doc(
Several blocks at once, fetched in parallel from their workers: one Buffer per id in the same
order, ``None`` for an id that no live worker holds.
)doc")
      .def("get_or_compute", &PyClient::GetOrCompute, py::arg("id"), py::arg("level"),
           py::arg("fn"), R"doc(
Block ``id`` if a live worker holds it; otherwise calls ``fn()``, stores what it returns at
``level`` and returns that. ``fn`` returns a bytes-like object or a list of them (stored
concatenated). When several clients, in any processes, ask for the same missing block at once,
exactly one runs its ``fn`` and the others wait for its result. ``fn`` runs with the GIL held
while this client keeps renewing its lease; an exception from it is re-raised here (and the
next waiter computes instead).
)doc")
      .def(
          "locations",
          [](PyClient& self, const py::iterable& ids) {
            std::vector<BlockId> blocks = ToBlockIds(ids);
            auto result = self.Run([&](Client& c) { return c.Locations(blocks); });
            ThrowIfError(result.status());
            return *result;
          },
          py::arg("ids"), "Where each block is stored, one BlockLocations per id.")
      .def(
          "workers",
          [](PyClient& self) {
            auto result = self.Run([](Client& c) { return c.Workers(); });
            ThrowIfError(result.status());
            return *result;
          },
          "The live workers, sorted by id.")
      .def(
          "rdds",
          [](PyClient& self) {
            auto result = self.Run([](Client& c) { return c.Rdds(); });
            ThrowIfError(result.status());
            return *result;
          },
          "The cached RDDs, sorted by id.")
      .def(
          "blocks",
          [](PyClient& self, std::optional<uint64_t> rdd) {
            auto result = self.Run([&](Client& c) { return c.Blocks(rdd); });
            ThrowIfError(result.status());
            return *result;
          },
          py::arg("rdd") = py::none(), "Every known block, or those of RDD ``rdd``.")
      .def(
          "remove",
          [](PyClient& self, const py::iterable& ids) {
            std::vector<BlockId> blocks = ToBlockIds(ids);
            auto result = self.Run([&](Client& c) { return c.Remove(blocks); });
            ThrowIfError(result.status());
            return *result;
          },
          py::arg("ids"), "Removes the blocks wherever they are; returns how many existed.")
      .def(
          "remove_rdd",
          [](PyClient& self, uint64_t rdd) {
            auto result = self.Run([&](Client& c) { return c.RemoveRdd(rdd); });
            ThrowIfError(result.status());
            return *result;
          },
          py::arg("rdd_id"), "Removes every block of the RDD; returns how many there were.")
      .def(
          "register_rdd",
          [](PyClient& self, uint64_t rdd, const std::string& name, const std::string& level,
             uint64_t partitions) {
            const StorageLevel storage_level = ToLevel(level);
            Status status = self.Run(
                [&](Client& c) { return c.RegisterRdd(rdd, name, storage_level, partitions); });
            ThrowIfError(status);
          },
          py::arg("rdd_id"), py::arg("name"), py::arg("level") = "MEMORY_AND_DISK",
          py::arg("partitions") = 0, R"doc(
Describes RDD ``rdd_id`` to the master (name, level, partition count) for ``bmctl rdds``.
)doc")
      .def(
          "ping",
          [](PyClient& self) { ThrowIfError(self.Run([](Client& c) { return c.PingMaster(); })); },
          "Returns when the master answers; raises Unavailable after the timeout.")
      .def_property_readonly(
          "counters",
          [](PyClient& self) { return self.Run([](Client& c) { return c.counters(); }); },
          "What this client's get_or_compute calls did so far.")
      .def(
          "take_counters",
          [](PyClient& self) { return self.Run([](Client& c) { return c.TakeCounters(); }); },
          "Returns the counters and starts them again from zero.")
      .def(
          "register_shuffle",
          [](PyClient& self, uint64_t shuffle_id, uint32_t maps, uint32_t partitions,
             const std::string& level) {
            const ShuffleSpec spec{shuffle_id, maps, partitions, ToLevel(level)};
            auto layout = self.Run([&](Client& c) { return c.RegisterShuffle(spec); });
            ThrowIfError(layout.status());
            return LayoutToDict(*layout);
          },
          py::arg("shuffle_id"), py::arg("maps"), py::arg("partitions"),
          py::arg("level") = "MEMORY_AND_DISK", R"doc(
Registers a shuffle of ``maps`` map tasks into ``partitions`` reduce partitions (the same again
is fine; another shape under the id raises InvalidArgument). Returns its layout as a dict.
)doc")
      .def(
          "shuffle_writer",
          [](PyClient& self, uint64_t shuffle_id, uint32_t map, uint32_t attempt) {
            auto writer =
                self.Run([&](Client& c) { return c.OpenShuffleWriter(shuffle_id, map, attempt); });
            ThrowIfError(writer.status());
            return std::make_unique<PyShuffleWriter>(self, std::move(*writer));
          },
          py::arg("shuffle_id"), py::arg("map"), py::arg("attempt") = 0, py::keep_alive<0, 1>(),
          "A ShuffleWriter for attempt ``attempt`` of map ``map``.")
      .def(
          "shuffle_reader",
          [](PyClient& self, uint64_t shuffle_id, uint32_t partition) {
            auto reader =
                self.Run([&](Client& c) { return c.OpenShuffleReader(shuffle_id, partition); });
            ThrowIfError(reader.status());
            return std::make_unique<PyShuffleReader>(self, std::move(*reader));
          },
          py::arg("shuffle_id"), py::arg("partition"), py::keep_alive<0, 1>(),
          "A ShuffleReader of one reduce partition.")
      .def(
          "unregister_shuffle",
          [](PyClient& self, uint64_t shuffle_id) {
            ThrowIfError(self.Run([&](Client& c) { return c.UnregisterShuffle(shuffle_id); }));
          },
          py::arg("shuffle_id"), "Removes the shuffle and its data on every worker.")
      .def(
          "shuffles",
          [](PyClient& self) {
            auto list = self.Run([](Client& c) { return c.Shuffles(); });
            ThrowIfError(list.status());
            py::list out;
            for (const ShuffleSummary& s : *list) {
              out.append(py::dict(py::arg("shuffle_id") = s.spec.id, py::arg("maps") = s.spec.maps,
                                  py::arg("partitions") = s.spec.partitions,
                                  py::arg("level") = std::string(StorageLevelName(s.spec.level)),
                                  py::arg("committed_maps") = s.committed_maps,
                                  py::arg("bytes") = s.bytes, py::arg("workers") = s.workers));
            }
            return out;
          },
          "The registered shuffles, as dicts.")
      .def("close", &PyClient::Close, "Closes the connections; later calls raise Error.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyClient& self, py::args) { self.Close(); });
}

}  // namespace bm::python
