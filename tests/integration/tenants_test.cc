// Tenants, shares and quotas (docs/security.md "Tenants, shares and quotas") against real
// bm-master, bm-worker and bmctl processes with CURVE keys: alice and bob are client keys of two
// tenants, `client` a client key without a tenant (the default tenant), `admin` an admin key.

#include <capnp/message.h>
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "blockmgr/client.h"
#include "common/core/protocol.h"
#include "common/net/transport.h"
#include "common/security/curve_keys.h"
#include "common/security/tenant.h"
#include "tests/support/local_cluster.h"
#include "tests/support/process.h"
#include "tests/support/request_kinds.h"
#include "tests/support/temp_dir.h"

namespace bm::testing {
namespace {

using std::chrono::seconds;

class TenantTest : public ::testing::Test {
 protected:
  // A keyed cluster of two workers whose allow-list also holds alice (tenant "alice"), bob
  // (tenant "bob") and carol (tenant "bob" too).
  void StartCluster(const std::string& state_dir = "", const std::string& memory = "64MiB") {
    if (!CurveAvailable()) GTEST_SKIP() << "libzmq was built without CURVE (libsodium)";
    ASSERT_NO_FATAL_FAILURE(cluster_.UseKeys({"w1", "w2"}));
    for (auto [name, tenant] : {std::pair{"alice", "alice"}, {"bob", "bob"}, {"carol", "bob"}}) {
      ASSERT_TRUE(GenerateCertificate(cluster_.keys_dir(), name, KeyRole::kClient).ok());
      std::ofstream(cluster_.keys_dir() + "/" + name + ".tenant") << tenant << "\n";
    }
    if (!state_dir.empty()) cluster_.SetMasterStateDir(state_dir);
    ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
    ASSERT_NO_FATAL_FAILURE(cluster_.StartWorker({"w1", memory, ""}));
    ASSERT_NO_FATAL_FAILURE(cluster_.StartWorker({"w2", memory, ""}));
  }

  CommandResult Put(const std::string& key, const std::string& block, const std::string& bytes,
                    const std::string& worker = "w1") {
    return cluster_.BmctlAs(key, {"put", block, "-", "--level", "MEMORY_ONLY", "--worker", worker},
                            bytes);
  }

  // One request straight to a worker's data port with key NAME, as a client that skips the
  // master would send it.
  Status RawToWorker(const std::string& key, const std::string& worker,
                     const std::function<void(proto::Request::Builder)>& fill) {
    capnp::MallocMessageBuilder message;
    proto::Request::Builder request = message.initRoot<proto::Request>();
    request.setId(1);
    fill(request);
    return Raw(key, cluster_.worker_endpoint(worker), worker, message);
  }

  // `message` sent with key NAME to the server at `endpoint` whose certificate is `server`:
  // Ok, or the error it was answered with.
  Status Raw(const std::string& key, const std::string& endpoint, const std::string& server,
             capnp::MallocMessageBuilder& message) {
    RpcChannel channel(context_, endpoint, seconds(5), cluster_.SecurityOf(key, server));
    Result<IncomingMessage> reply = channel.Call(message);
    if (!reply.ok()) return reply.status();
    return ReadGuarded([&]() -> Status {
      if (reply->reply().isError()) return StatusFromError(reply->reply().getError());
      return Status::Ok();
    });
  }

  Status RawGet(const std::string& key, const std::string& worker, const std::string& block) {
    return RawToWorker(key, worker, [&](proto::Request::Builder request) {
      auto get = request.initGetBlock();
      get.setBlockId(block);
      get.setMaxLength(1 << 20);
    });
  }

  // A one-piece raw put of `bytes`.
  Status RawPut(const std::string& key, const std::string& worker, const std::string& block,
                const std::string& bytes) {
    RpcChannel channel(context_, cluster_.worker_endpoint(worker), seconds(5),
                       cluster_.SecurityOf(key, worker));
    capnp::MallocMessageBuilder message;
    proto::Request::Builder request = message.initRoot<proto::Request>();
    request.setId(1);
    auto put = request.initPutBlock();
    put.setBlockId(block);
    put.setLevel(proto::StorageLevel::MEMORY_ONLY);
    put.setTotalSize(bytes.size());
    put.setLast(true);
    put.setUploadId(77);
    put.setVersion(12345);
    std::vector<zmq::message_t> payload;
    payload.emplace_back(bytes.data(), bytes.size());
    Result<IncomingMessage> reply = channel.Call(message, std::move(payload));
    if (!reply.ok()) return reply.status();
    return ReadGuarded([&]() -> Status {
      if (reply->reply().isError()) return StatusFromError(reply->reply().getError());
      return Status::Ok();
    });
  }

  static void ExpectRefused(const CommandResult& result, const std::string& tenant,
                            const std::string& dataset) {
    EXPECT_NE(result.exit_code, 0) << result.out;
    EXPECT_NE(result.err.find("permission denied"), std::string::npos) << result.err;
    EXPECT_NE(result.err.find("tenant '" + tenant + "'"), std::string::npos) << result.err;
    EXPECT_NE(result.err.find(dataset), std::string::npos) << result.err;
  }

  static void ExpectDenied(const Status& status, const std::string& tenant,
                           const std::string& dataset) {
    EXPECT_EQ(status.code(), StatusCode::kPermissionDenied) << status.ToString();
    EXPECT_NE(status.message().find("tenant '" + tenant + "'"), std::string::npos)
        << status.ToString();
    EXPECT_NE(status.message().find(dataset), std::string::npos) << status.ToString();
  }

  bool ListsRdd(const std::string& key, const std::string& rdd) {
    CommandResult rdds = cluster_.BmctlAs(key, {"--json", "rdds"});
    EXPECT_EQ(rdds.exit_code, 0) << rdds.err;
    for (const auto& entry : nlohmann::json::parse(rdds.out)) {
      if (std::to_string(entry["rdd"].get<uint64_t>()) == rdd) return true;
    }
    return false;
  }

  LocalCluster cluster_;
  zmq::context_t context_;
};

TEST_F(TenantTest, TenantKeyCannotTouchAnotherTenantsRddUntilShared) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  ASSERT_EQ(Put("alice", "rdd_7_0", "alice's partition").exit_code, 0);

  // Through the master (what bmctl and the client library do).
  ExpectRefused(cluster_.BmctlAs("bob", {"get", "rdd_7_0"}), "bob", "rdd_7");
  ExpectRefused(cluster_.BmctlAs("bob", {"locations", "rdd_7_0"}), "bob", "rdd_7");
  ExpectRefused(cluster_.BmctlAs("bob", {"blocks", "--rdd", "7"}), "bob", "rdd_7");
  ExpectRefused(Put("bob", "rdd_7_1", "bob's bytes"), "bob", "rdd_7");
  ExpectRefused(cluster_.BmctlAs("bob", {"rm", "rdd_7_0"}), "bob", "rdd_7");
  ExpectRefused(cluster_.BmctlAs("bob", {"rm-rdd", "7"}), "bob", "rdd_7");
  EXPECT_FALSE(ListsRdd("bob", "7"));
  EXPECT_TRUE(ListsRdd("alice", "7"));
  // Straight to the worker that holds it: refused there too, for reads and overwrites.
  ExpectDenied(RawGet("bob", "w1", "rdd_7_0"), "bob", "rdd_7");
  ExpectDenied(RawPut("bob", "w1", "rdd_7_0", "overwrite"), "bob", "rdd_7");
  ExpectDenied(RawPut("bob", "w2", "rdd_7_5", "sneaked in"), "bob", "rdd_7");
  // The default tenant (a key without one) is another tenant.
  ExpectRefused(cluster_.BmctlAs("client", {"get", "rdd_7_0"}), "default", "rdd_7");
  // Nothing of alice's was lost or changed.
  CommandResult mine = cluster_.BmctlAs("alice", {"get", "rdd_7_0"});
  ASSERT_EQ(mine.exit_code, 0) << mine.err;
  EXPECT_EQ(mine.out, "alice's partition");
  EXPECT_FALSE(cluster_.WorkerHolds("w2", "rdd_7_5"));

  // Only the owner may share.
  ExpectRefused(cluster_.BmctlAs("bob", {"share", "7", "bob"}), "bob", "rdd_7");
  CommandResult shared = cluster_.BmctlAs("alice", {"share", "7", "bob"});
  ASSERT_EQ(shared.exit_code, 0) << shared.err;
  // Shared: bob (and carol, of tenant bob) may read, over the master and the worker ...
  CommandResult read = cluster_.BmctlAs("bob", {"get", "rdd_7_0"});
  ASSERT_EQ(read.exit_code, 0) << read.err;
  EXPECT_EQ(read.out, "alice's partition");
  EXPECT_EQ(cluster_.BmctlAs("carol", {"locations", "rdd_7_0"}).exit_code, 0);
  EXPECT_TRUE(RawGet("bob", "w1", "rdd_7_0").ok());
  EXPECT_TRUE(ListsRdd("bob", "7"));
  // ... read-only: no put, no removal.
  ExpectRefused(Put("bob", "rdd_7_1", "bob's bytes"), "bob", "rdd_7");
  ExpectDenied(RawPut("bob", "w1", "rdd_7_0", "overwrite"), "bob", "rdd_7");
  ExpectRefused(cluster_.BmctlAs("bob", {"rm", "rdd_7_0"}), "bob", "rdd_7");
  EXPECT_EQ(cluster_.BmctlAs("bob", {"share", "7", "carol-tenant"}).exit_code, 1);

  // Unshared: refused again, also by the worker that had let bob read.
  ASSERT_EQ(cluster_.BmctlAs("alice", {"unshare", "7", "bob"}).exit_code, 0);
  ExpectRefused(cluster_.BmctlAs("bob", {"get", "rdd_7_0"}), "bob", "rdd_7");
  // The worker hears of it from the master (datasetAccess): wait for that, bounded.
  Status raw;
  EXPECT_TRUE(WaitFor(
      [&] {
        raw = RawGet("bob", "w1", "rdd_7_0");
        return !raw.ok();
      },
      seconds(5)));
  ExpectDenied(raw, "bob", "rdd_7");

  // The owner removes its own RDD.
  CommandResult removed = cluster_.BmctlAs("alice", {"rm-rdd", "7"});
  EXPECT_EQ(removed.exit_code, 0) << removed.err;
}

// Every request kind of the schema that names a block or an RDD, sent with bob's key naming
// alice's block, straight to the worker that holds it and to the master: each is refused, or
// not served there at all. A verifyBlock was answered ("intact, memory"), and with reportedBad
// counted a corruption in transit against alice's block.
TEST_F(TenantTest, NoRequestKindNamingAnotherTenantsBlockPassesTheGate) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  ASSERT_EQ(Put("alice", "rdd_100_0", "alice's partition").exit_code, 0);
  {  // and alice's shuffle 100, with partitions on both workers
    Client alice(cluster_.ClientOptionsFor("alice"));
    ASSERT_TRUE(alice.RegisterShuffle({.id = 100, .maps = 2, .partitions = 4}).ok());
  }
  int refused = 0;
  for (const testing::RequestKind& kind : testing::AllRequestKinds()) {
    if (!testing::NamesABlockOrAnRdd(kind)) continue;
    const BlockId block = testing::SampleBlockFor(kind);
    for (const auto& [server, endpoint] :
         {std::pair{std::string("w1"), cluster_.worker_endpoint("w1")},
          std::pair{std::string("master"), cluster_.master_endpoint()}}) {
      capnp::MallocMessageBuilder message;
      testing::BuildRequestNaming(message, kind, block);
      const Status status = Raw("bob", endpoint, server, message);
      if (status.code() == StatusCode::kInvalidArgument &&
          (status.message().find("not served by a worker") != std::string::npos ||
           status.message().find("unsupported request") != std::string::npos)) {
        continue;  // not this server's request
      }
      ++refused;
      EXPECT_EQ(status.code(), StatusCode::kPermissionDenied)
          << kind.name << " to " << server << ": " << status.ToString();
    }
  }
  EXPECT_GE(refused, 15);
  // reportedBad too: refused, and nothing is counted against alice's block.
  const Status reported = RawToWorker("bob", "w1", [](proto::Request::Builder request) {
    proto::VerifyBlock::Builder verify = request.initVerifyBlock();
    verify.setBlockId("rdd_100_0");
    verify.setReportedBad(true);
  });
  ExpectDenied(reported, "bob", "rdd_100");
  // The owner still verifies and reads its block.
  EXPECT_TRUE(RawToWorker("alice", "w1", [](proto::Request::Builder request) {
                request.initVerifyBlock().setBlockId("rdd_100_0");
              }).ok());
  CommandResult mine = cluster_.BmctlAs("alice", {"get", "rdd_100_0"});
  ASSERT_EQ(mine.exit_code, 0) << mine.err;
  EXPECT_EQ(mine.out, "alice's partition");
}

// A shuffle is its registering tenant's: another tenant can neither see, read, push to, commit
// to nor remove it, through the master or straight to a worker.
TEST_F(TenantTest, AnotherTenantCannotTouchAShuffle) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  Client alice(cluster_.ClientOptionsFor("alice"));
  Client bob(cluster_.ClientOptionsFor("bob"));
  const ShuffleSpec spec{.id = 30, .maps = 1, .partitions = 2};
  Result<ShuffleLayout> layout = alice.RegisterShuffle(spec);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  Result<std::unique_ptr<ShuffleWriter>> writer = alice.OpenShuffleWriter(spec.id, 0, 0);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  const std::string text = "alice's map output";
  const auto bytes = std::as_bytes(std::span(text.data(), text.size()));
  ASSERT_TRUE((*writer)->Write(0, bytes).ok());
  ASSERT_TRUE((*writer)->Write(1, bytes).ok());
  ASSERT_TRUE((*writer)->Commit().ok());

  EXPECT_EQ(bob.RegisterShuffle(spec).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(bob.ShuffleLayoutOf(spec.id).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(bob.OpenShuffleWriter(spec.id, 0, 1).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(bob.UnregisterShuffle(spec.id).code(), StatusCode::kPermissionDenied);
  Result<std::vector<ShuffleSummary>> listed = bob.Shuffles();
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());
  Result<std::unique_ptr<ShuffleReader>> reader = bob.OpenShuffleReader(spec.id, 0);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->ReadAll().status().code(), StatusCode::kPermissionDenied);
  // Straight to the worker holding partition 0: a push and a read, both refused.
  const std::string worker = layout->workers[layout->primaries[0]].worker_id;
  ExpectDenied(RawToWorker("bob", worker,
                           [&](proto::Request::Builder request) {
                             proto::PushShuffle::Builder push = request.initPushShuffle();
                             push.setShuffleId(spec.id);
                             push.initPieces(0);
                           }),
               "bob", "shuffle");
  ExpectDenied(RawToWorker("bob", worker,
                           [&](proto::Request::Builder request) {
                             request.initReadShuffle().setShuffleId(spec.id);
                           }),
               "bob", "shuffle_30");
  // A forward is a worker's to send: not even the owner may push one straight to a replica.
  Status forwarded = RawToWorker("alice", worker, [&](proto::Request::Builder request) {
    proto::PushShuffle::Builder push = request.initPushShuffle();
    push.setShuffleId(spec.id);
    push.setForwarded(true);
    push.initPieces(0);
  });
  EXPECT_EQ(forwarded.code(), StatusCode::kPermissionDenied) << forwarded.ToString();
  EXPECT_NE(forwarded.message().find("only workers forward"), std::string::npos)
      << forwarded.ToString();
  // Alice still reads her output.
  Result<std::unique_ptr<ShuffleReader>> hers = alice.OpenShuffleReader(spec.id, 1);
  ASSERT_TRUE(hers.ok());
  Result<std::vector<std::byte>> read = (*hers)->ReadAll();
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(read->data()), read->size()), text);

  // Two copies with keys on: each primary forwards to its replica with its worker key.
  const ShuffleSpec twice{
      .id = 31, .maps = 1, .partitions = 2, .level = StorageLevel::kMemoryAndDisk2};
  ASSERT_TRUE(alice.RegisterShuffle(twice).ok());
  Result<std::unique_ptr<ShuffleWriter>> both = alice.OpenShuffleWriter(twice.id, 0, 0);
  ASSERT_TRUE(both.ok());
  ASSERT_TRUE((*both)->Write(0, bytes).ok());
  Status committed = (*both)->Commit();
  ASSERT_TRUE(committed.ok()) << committed.ToString();
  Result<std::unique_ptr<ShuffleReader>> copies = alice.OpenShuffleReader(twice.id, 0);
  ASSERT_TRUE(copies.ok());
  Result<std::vector<std::byte>> again = (*copies)->ReadAll();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(again->data()), again->size()), text);
}

TEST_F(TenantTest, AdminSeesAllAndKeysWithoutTenantWorkAsBefore) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  ASSERT_EQ(Put("alice", "rdd_3_0", "a").exit_code, 0);
  ASSERT_EQ(Put("bob", "rdd_4_0", "b").exit_code, 0);
  // A key without a tenant: puts, gets and lists its own as before tenants.
  ASSERT_EQ(Put("client", "rdd_5_0", "c").exit_code, 0);
  CommandResult own = cluster_.BmctlAs("client", {"get", "rdd_5_0"});
  ASSERT_EQ(own.exit_code, 0) << own.err;
  EXPECT_EQ(own.out, "c");
  EXPECT_TRUE(ListsRdd("client", "5"));
  EXPECT_FALSE(ListsRdd("client", "3"));
  EXPECT_FALSE(ListsRdd("alice", "4"));
  // Removal stays an admin's (or a tenant key's) right, as before.
  EXPECT_NE(cluster_.BmctlAs("client", {"rm", "rdd_5_0"}).exit_code, 0);
  // Admin: sees and reads everything, and removes anyone's.
  for (const std::string rdd : {"3", "4", "5"}) EXPECT_TRUE(ListsRdd("admin", rdd)) << rdd;
  EXPECT_EQ(cluster_.Bmctl({"get", "rdd_4_0"}).out, "b");
  EXPECT_TRUE(RawGet("admin", "w1", "rdd_3_0").ok());
  CommandResult tenants = cluster_.Bmctl({"--json", "tenants"});
  ASSERT_EQ(tenants.exit_code, 0) << tenants.err;
  std::set<std::string> names;
  for (const auto& entry : nlohmann::json::parse(tenants.out)) {
    names.insert(entry["tenant"].get<std::string>());
  }
  EXPECT_EQ(names, (std::set<std::string>{"alice", "bob", "default"}));
  CommandResult own_only = cluster_.BmctlAs("alice", {"--json", "tenants"});
  ASSERT_EQ(own_only.exit_code, 0) << own_only.err;
  ASSERT_EQ(nlohmann::json::parse(own_only.out).size(), 1u);
  EXPECT_EQ(cluster_.Bmctl({"rm-rdd", "4"}).exit_code, 0);
}

TEST_F(TenantTest, FirstPutOfTwoTenantsOnTwoWorkersHasOneOwner) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  // Both race to create RDD 9, each on its own worker.
  CommandResult a;
  CommandResult b;
  std::thread alice([&] { a = Put("alice", "rdd_9_0", "from alice", "w1"); });
  std::thread bob([&] { b = Put("bob", "rdd_9_1", "from bob", "w2"); });
  alice.join();
  bob.join();
  EXPECT_NE(a.exit_code == 0, b.exit_code == 0) << a.err << " / " << b.err;
  const std::string winner = a.exit_code == 0 ? "alice" : "bob";
  const std::string loser = a.exit_code == 0 ? "bob" : "alice";
  ExpectRefused(a.exit_code == 0 ? b : a, loser, "rdd_9");
  EXPECT_TRUE(ListsRdd(winner, "9"));
  EXPECT_FALSE(ListsRdd(loser, "9"));
  EXPECT_FALSE(cluster_.WorkerHolds(loser == "alice" ? "w1" : "w2",
                                    loser == "alice" ? "rdd_9_0" : "rdd_9_1"));
}

// 8 threads put 40 blocks of 64 KiB into alice's RDD against a memory quota of 10 blocks and a
// bit: exactly 10 are stored, and every refusal is "quota exceeded", made when the next block
// would pass the quota.
TEST_F(TenantTest, QuotaRefusalsAreExactUnderEightConcurrentPutters) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  constexpr uint64_t kBlock = 64 * 1024;
  constexpr uint64_t kQuota = 10 * kBlock + kBlock / 2;
  CommandResult set = cluster_.Bmctl(
      {"quota", "set", "alice", "--memory", std::to_string(kQuota), "--disk", "1MiB"});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  std::atomic<int> stored{0};
  std::atomic<int> refused{0};
  std::atomic<int> other{0};
  std::vector<std::string> failures(8);
  std::vector<std::thread> putters;
  for (int t = 0; t < 8; ++t) {
    putters.emplace_back([&, t] {
      Client client(cluster_.ClientOptionsFor("alice"));
      const std::vector<std::byte> bytes(kBlock, std::byte{static_cast<unsigned char>(t)});
      for (int i = 0; i < 5; ++i) {
        Result<PutResult> put = client.Put(BlockId::Rdd(21, static_cast<uint64_t>(t * 5 + i)),
                                           bytes, StorageLevel::kMemoryOnly);
        if (put.ok()) {
          ++stored;
        } else if (IsQuotaExceeded(put.status())) {
          ++refused;
        } else {
          ++other;
          failures[t] = put.status().ToString();
        }
      }
    });
  }
  for (std::thread& putter : putters) putter.join();
  for (const std::string& failure : failures) EXPECT_EQ(failure, "");
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(stored.load(), 10);
  EXPECT_EQ(refused.load(), 30);
  nlohmann::json tenants = cluster_.BmctlJson({"tenants"});
  ASSERT_EQ(tenants.size(), 1u) << tenants.dump();
  EXPECT_EQ(tenants[0]["tenant"], "alice");
  EXPECT_EQ(tenants[0]["memory_bytes"].get<uint64_t>(), 10 * kBlock);
  EXPECT_LE(tenants[0]["memory_bytes"].get<uint64_t>(), kQuota);
  EXPECT_EQ(tenants[0]["memory_quota"].get<uint64_t>(), kQuota);
  // bmctl says so with its own exit code; another tenant is not limited by alice's quota.
  CommandResult over = Put("alice", "rdd_21_99", std::string(kBlock, 'x'));
  EXPECT_EQ(over.exit_code, 3) << over.err;
  EXPECT_NE(over.err.find("quota exceeded"), std::string::npos) << over.err;
  EXPECT_EQ(Put("bob", "rdd_22_0", std::string(kBlock, 'x')).exit_code, 0);
  // Room again once alice removes a block.
  ASSERT_EQ(cluster_.BmctlAs("alice", {"rm-rdd", "21"}).exit_code, 0);
  EXPECT_EQ(Put("alice", "rdd_21_99", std::string(kBlock, 'x')).exit_code, 0);
}

// A put of two copies is admitted against the quota whole: with 16 of 20 MiB used, a 4 MiB
// MEMORY_ONLY_2 put is refused and stores no copy (one copy stayed behind, readable and
// counted, while bmctl said "quota exceeded"); a 2 MiB one fits exactly, both copies.
TEST_F(TenantTest, AReplicatedPutRefusedForItsQuotaLeavesNoCopyBehind) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  constexpr uint64_t kMiB = 1024 * 1024;
  ASSERT_EQ(cluster_.Bmctl({"quota", "set", "alice", "--memory", "20MiB"}).exit_code, 0);
  ASSERT_EQ(Put("alice", "rdd_50_0", std::string(16 * kMiB, 'a')).exit_code, 0);
  auto usage = [&] {
    nlohmann::json tenants = cluster_.BmctlJson({"tenants"});
    EXPECT_EQ(tenants.size(), 1u) << tenants.dump();
    return tenants.empty() ? nlohmann::json() : tenants[0];
  };
  ASSERT_EQ(usage()["memory_bytes"].get<uint64_t>(), 16 * kMiB);

  CommandResult over = cluster_.BmctlAs(
      "alice", {"put", "rdd_50_1", "-", "--level", "MEMORY_ONLY_2"}, std::string(4 * kMiB, 'b'));
  EXPECT_EQ(over.exit_code, 3) << over.err;
  EXPECT_NE(over.err.find("quota exceeded"), std::string::npos) << over.err;
  EXPECT_FALSE(cluster_.WorkerHolds("w1", "rdd_50_1"));
  EXPECT_FALSE(cluster_.WorkerHolds("w2", "rdd_50_1"));
  EXPECT_EQ(cluster_.BmctlAs("alice", {"get", "rdd_50_1"}).exit_code, 1);
  nlohmann::json after = usage();
  EXPECT_EQ(after["memory_bytes"].get<uint64_t>(), 16 * kMiB) << after.dump();
  EXPECT_EQ(after["reserved_bytes"].get<uint64_t>(), 0u) << after.dump();

  CommandResult fits = cluster_.BmctlAs(
      "alice", {"put", "rdd_50_2", "-", "--level", "MEMORY_ONLY_2"}, std::string(2 * kMiB, 'c'));
  ASSERT_EQ(fits.exit_code, 0) << fits.err;
  EXPECT_TRUE(cluster_.WorkerHolds("w1", "rdd_50_2"));
  EXPECT_TRUE(cluster_.WorkerHolds("w2", "rdd_50_2"));
  after = usage();
  EXPECT_EQ(after["memory_bytes"].get<uint64_t>(), 20 * kMiB) << after.dump();
  EXPECT_EQ(after["reserved_bytes"].get<uint64_t>(), 0u) << after.dump();
}

TEST_F(TenantTest, QuotaHoldsAcrossAMasterRestart) {
  TempDir state;
  ASSERT_NO_FATAL_FAILURE(StartCluster(state.Sub("master")));
  constexpr uint64_t kBlock = 32 * 1024;
  ASSERT_EQ(
      cluster_.Bmctl({"quota", "set", "alice", "--memory", std::to_string(2 * kBlock)}).exit_code,
      0);
  ASSERT_EQ(Put("alice", "rdd_30_0", std::string(kBlock, 'a')).exit_code, 0);
  ASSERT_EQ(Put("alice", "rdd_30_1", std::string(kBlock, 'b')).exit_code, 0);
  ASSERT_EQ(Put("alice", "rdd_30_2", std::string(kBlock, 'c')).exit_code, 3);
  cluster_.KillMaster();
  ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
  // Both workers registered again (not only restored from the journal): they ask the master.
  ASSERT_TRUE(WaitFor(
      [&] {
        CommandResult workers = cluster_.Bmctl({"--json", "workers"});
        if (workers.exit_code != 0) return false;
        int active = 0;
        for (const auto& worker : nlohmann::json::parse(workers.out)) {
          active += worker["state"] == "active" ? 1 : 0;
        }
        return active == 2;
      },
      seconds(30)));
  // The quota, the owner and the bytes are all back.
  CommandResult again = Put("alice", "rdd_30_2", std::string(kBlock, 'c'));
  EXPECT_EQ(again.exit_code, 3) << again.err;
  EXPECT_NE(again.err.find("quota exceeded"), std::string::npos) << again.err;
  ExpectRefused(cluster_.BmctlAs("bob", {"get", "rdd_30_0"}), "bob", "rdd_30");
  nlohmann::json tenants = cluster_.BmctlJson({"tenants"});
  ASSERT_EQ(tenants.size(), 1u) << tenants.dump();
  EXPECT_EQ(tenants[0]["memory_quota"].get<uint64_t>(), 2 * kBlock);
  EXPECT_EQ(tenants[0]["memory_bytes"].get<uint64_t>(), 2 * kBlock);
  ASSERT_EQ(cluster_.Bmctl({"quota", "rm", "alice"}).exit_code, 0);
  EXPECT_EQ(Put("alice", "rdd_30_2", std::string(kBlock, 'c')).exit_code, 0);
}

// Bob has a memory quota, so what it admits is his guaranteed share; alice has none. Alice's puts
// into a full worker evict her own older blocks, never bob's, although his are the least
// recently used.
TEST_F(TenantTest, QuotaEvictionForOneTenantLeavesAnothersGuaranteedBytesInPlace) {
  ASSERT_NO_FATAL_FAILURE(StartCluster("", "4MiB"));
  ASSERT_EQ(cluster_.Bmctl({"quota", "set", "bob", "--memory", "2MiB"}).exit_code, 0);
  const std::string block(768 * 1024, 'x');
  ASSERT_EQ(Put("bob", "rdd_40_0", block).exit_code, 0);
  ASSERT_EQ(Put("bob", "rdd_40_1", block).exit_code, 0);
  for (int rdd = 41; rdd <= 46; ++rdd) {
    CommandResult put = Put("alice", "rdd_" + std::to_string(rdd) + "_0", block);
    ASSERT_EQ(put.exit_code, 0) << put.err;
  }
  EXPECT_TRUE(cluster_.WorkerHolds("w1", "rdd_40_0"));
  EXPECT_TRUE(cluster_.WorkerHolds("w1", "rdd_40_1"));
  EXPECT_FALSE(cluster_.WorkerHolds("w1", "rdd_41_0"));  // alice's own went instead
  EXPECT_TRUE(cluster_.WorkerHolds("w1", "rdd_46_0"));
}

}  // namespace
}  // namespace bm::testing
