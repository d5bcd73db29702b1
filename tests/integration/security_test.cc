// Keys, the ZAP allow-list and roles, against real bm-master / bm-worker / bmctl processes.
// Each attack an outsider could make on a cluster without keys is tried twice: it must work
// against an --insecure (loopback, keyless) cluster, so the test can fail, and be refused once
// the cluster runs with keys.

#include <capnp/message.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "blockmgr/client.h"
#include "common/core/protocol.h"
#include "common/net/peer_monitor.h"
#include "common/net/transport.h"
#include "common/security/curve_keys.h"
#include "tests/support/files.h"
#include "tests/support/local_cluster.h"
#include "tests/support/process.h"
#include "tests/support/tcp_proxy.h"
#include "tests/support/temp_dir.h"

namespace bm::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const std::string kBlock = "rdd_7_0";

// One raw request, as a plain ZeroMQ peer would send it.
Result<IncomingMessage> RawCall(zmq::context_t& context, const std::string& endpoint,
                                const ChannelSecurity& security,
                                const std::function<void(proto::Request::Builder)>& fill) {
  RpcChannel channel(context, endpoint, seconds(3), security);
  capnp::MallocMessageBuilder message;
  fill(message.initRoot<proto::Request>());
  return channel.Call(message);
}

// Open descriptors of a process (its /proc/PID/fd entries); -1 if it is gone.
int OpenDescriptors(pid_t pid) {
  std::error_code error;
  std::filesystem::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", error);
  if (error) return -1;
  int count = 0;
  for (; it != std::filesystem::directory_iterator(); it.increment(error)) {
    if (error) return -1;
    ++count;
  }
  return count;
}

// Sends `count` registerWorker requests over one connection, pipelined in batches, as a
// registration storm would, and tallies the replies by status code (a reply that does not
// come within 10 s counts as kUnavailable under the key -1). Stops early when `stop` says so.
std::map<int, int> RegistrationStorm(
    zmq::context_t& context, const std::string& endpoint, const ChannelSecurity& security,
    int count, const std::function<std::string(int)>& id_of, const std::string& address,
    const std::function<bool()>& stop = [] { return false; }) {
  std::map<int, int> replies;
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  EXPECT_TRUE(ConfigureClientSocket(socket, security, endpoint).ok());
  socket.set(zmq::sockopt::rcvtimeo, 10000);
  socket.connect(endpoint);
  constexpr int kBatch = 500;  // under ZeroMQ's default high-water mark of 1000 messages
  for (int sent = 0; sent < count && !stop();) {
    const int batch = std::min(kBatch, count - sent);
    for (int i = 0; i < batch; ++i, ++sent) {
      capnp::MallocMessageBuilder message;
      auto request = message.initRoot<proto::Request>();
      request.setId(static_cast<uint64_t>(sent + 1));
      auto reg = request.initRegisterWorker();
      reg.setWorkerId(id_of(sent));
      reg.setAddress(address);
      reg.initStats().setMemoryCapacity(1ull << 40);
      EXPECT_TRUE(SendMessage(socket, nullptr, message).ok());
    }
    for (int i = 0; i < batch; ++i) {
      Result<IncomingMessage> reply = ReceiveMessage(socket, /*has_routing_id=*/false);
      if (!reply.ok()) {
        ++replies[-1];
        if (stop()) break;
        continue;
      }
      Status status = ReadGuarded([&]() -> Status {
        if (reply->reply().isError()) return StatusFromError(reply->reply().getError());
        return Status::Ok();
      });
      ++replies[static_cast<int>(status.code())];
    }
  }
  return replies;
}

class SecurityTest : public ::testing::Test {
 protected:
  void StartCluster(bool keys) {
    if (keys) {
      if (!CurveAvailable()) GTEST_SKIP() << "libzmq was built without CURVE (libsodium)";
      ASSERT_NO_FATAL_FAILURE(cluster_.UseKeys({"w1", "w2"}));
    }
    ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
    ASSERT_NO_FATAL_FAILURE(cluster_.StartWorker({"w1", "64MiB", ""}));
    ASSERT_NO_FATAL_FAILURE(cluster_.StartWorker({"w2", "64MiB", ""}));
  }

  // A keypair the cluster's allow-lists do not hold, as an outsider would make one.
  ChannelSecurity OutsiderKeys(const std::string& server_name) {
    if (!std::filesystem::exists(outsider_dir_.Sub("outsider.key_secret"))) {
      EXPECT_TRUE(
          GenerateCertificate(outsider_dir_.path().string(), "outsider", KeyRole::kAdmin).ok());
    }
    Result<CurveKeys> keys = LoadKeyPair(outsider_dir_.Sub("outsider.key_secret"));
    EXPECT_TRUE(keys.ok());
    ChannelSecurity security;
    if (keys.ok()) security.own = *keys;
    if (cluster_.keys_on()) {
      security.server_key = LoadCertificate(cluster_.PublicKeyFile(server_name))->public_key;
    }
    return security;
  }

  void PutBlock(const std::string& bytes, const std::string& level = "MEMORY_ONLY") {
    // On w1 by name: a fake worker may be listed with plenty of free memory.
    CommandResult put =
        cluster_.Bmctl({"put", kBlock, "-", "--level", level, "--worker", "w1"}, bytes);
    ASSERT_EQ(put.exit_code, 0) << put.err;
  }

  LocalCluster cluster_;
  TempDir outsider_dir_;
  zmq::context_t context_;
};

// ---- what an outsider can do to a cluster without keys, and cannot with them ----

// Each attack returns whether it worked, judged by its effect on the cluster.
struct Attacks {
  SecurityTest* test;
  LocalCluster& cluster;
  zmq::context_t& context;
  ChannelSecurity to_master;
  ChannelSecurity to_w1;

  bool FakeWorkerIsListed() {
    Result<IncomingMessage> reply =
        RawCall(context, cluster.master_endpoint(), to_master, [](proto::Request::Builder r) {
          auto reg = r.initRegisterWorker();
          reg.setWorkerId("evil");
          reg.setAddress("tcp://127.0.0.1:9");
          reg.initStats().setMemoryCapacity(1ull << 40);
        });
    std::vector<std::string> listed = cluster.ListedWorkers();
    return reply.ok() && std::find(listed.begin(), listed.end(), "evil") != listed.end();
  }

  bool TakesOverWorkerEntry() {
    Result<IncomingMessage> reply =
        RawCall(context, cluster.master_endpoint(), to_master, [](proto::Request::Builder r) {
          auto reg = r.initRegisterWorker();
          reg.setWorkerId("w2");
          reg.setAddress("tcp://127.0.0.1:9");
          reg.initStats();
        });
    return reply.ok();
  }

  bool SpoofedReportHidesBlock() {
    Result<IncomingMessage> reply =
        RawCall(context, cluster.master_endpoint(), to_master, [](proto::Request::Builder r) {
          auto report = r.initReportBlocks();
          report.setWorkerId("w1");
          auto update = report.initUpdates(1)[0];
          update.setRemoved(true);
          update.initStatus().setBlockId(kBlock);
          report.initStats();
        });
    return reply.ok() && cluster.Locations({kBlock})[kBlock].empty();
  }

  bool ReplicateAccepted() {
    Result<IncomingMessage> reply =
        RawCall(context, cluster.worker_endpoint("w1"), to_w1, [](proto::Request::Builder r) {
          auto copy = r.initReplicateBlock();
          copy.setBlockId(kBlock);
          copy.setLevel(proto::StorageLevel::MEMORY_ONLY);
          auto target = copy.initTargets(1)[0];
          target.setWorkerId("elsewhere");
          target.setAddress("tcp://127.0.0.1:9");
        });
    // Without keys the worker takes the command (and fails to reach the address); with keys
    // it must refuse to even try.
    return reply.ok() || reply.status().code() == StatusCode::kUnavailable ||
           reply.status().code() == StatusCode::kInternal;
  }

  bool DecommissionAccepted() {
    return RawCall(context, cluster.worker_endpoint("w1"), to_w1,
                   [](proto::Request::Builder r) { r.setDecommission(); })
        .ok();
  }

  bool RemoveRddDeletes() {
    Result<IncomingMessage> reply =
        RawCall(context, cluster.master_endpoint(), to_master,
                [](proto::Request::Builder r) { r.initRemoveRdd().setRddId(7); });
    return reply.ok() && reply->reply().getRemoved() > 0;
  }

  // What the attack achieves is the worker's exit. Its answer may not arrive: the worker
  // sometimes exits before ZeroMQ sends it (seen about once in ten runs; a known defect of the
  // shutdown path, whose answer PROTOCOL.md promises).
  bool ShutdownStopsWorker() {
    Result<IncomingMessage> reply = RawCall(context, cluster.worker_endpoint("w1"), to_w1,
                                            [](proto::Request::Builder r) { r.setShutdown(); });
    // Refused (a key not allowed, a role that may not): it stays up.
    if (!reply.ok() && reply.status().code() != StatusCode::kUnavailable) return false;
    return cluster.worker_process("w1").Wait(seconds(10)).has_value();
  }
};

TEST_F(SecurityTest, AttacksWorkAgainstAClusterWithoutKeys) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(false));
  ASSERT_NO_FATAL_FAILURE(PutBlock("payload"));
  Attacks attacks{this, cluster_, context_, {}, {}};
  EXPECT_TRUE(attacks.FakeWorkerIsListed());
  EXPECT_TRUE(attacks.SpoofedReportHidesBlock());
  ASSERT_NO_FATAL_FAILURE(PutBlock("payload"));
  EXPECT_TRUE(attacks.RemoveRddDeletes());
  ASSERT_NO_FATAL_FAILURE(PutBlock("payload"));
  EXPECT_TRUE(attacks.ReplicateAccepted());
  EXPECT_TRUE(attacks.TakesOverWorkerEntry());
  EXPECT_TRUE(attacks.DecommissionAccepted());
  EXPECT_TRUE(attacks.ShutdownStopsWorker()) << cluster_.LogTail("w1");
}

TEST_F(SecurityTest, AttacksWithAnUnknownKeyAreRefused) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(true));
  ASSERT_NO_FATAL_FAILURE(PutBlock("payload"));
  Attacks attacks{this, cluster_, context_, OutsiderKeys("master"), OutsiderKeys("w1")};
  EXPECT_FALSE(attacks.FakeWorkerIsListed());
  EXPECT_FALSE(attacks.SpoofedReportHidesBlock());
  EXPECT_FALSE(attacks.RemoveRddDeletes());
  EXPECT_FALSE(attacks.ReplicateAccepted());
  EXPECT_FALSE(attacks.TakesOverWorkerEntry());
  EXPECT_FALSE(attacks.DecommissionAccepted());
  EXPECT_FALSE(attacks.ShutdownStopsWorker());
  EXPECT_TRUE(cluster_.worker_process("w1").Running());
  EXPECT_EQ(cluster_.Locations({kBlock})[kBlock].size(), 1u);
  EXPECT_NE(ReadFile(cluster_.dir().Sub("master.log")).find("refused a connection from"),
            std::string::npos);
}

TEST_F(SecurityTest, AllowedKeysOutsideTheirRoleGetPermissionDenied) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(true));
  ASSERT_NO_FATAL_FAILURE(PutBlock("payload"));
  // A client key at the master: may not register, report or remove.
  Attacks as_client{this, cluster_, context_, cluster_.SecurityOf("client", "master"),
                    cluster_.SecurityOf("client", "w1")};
  EXPECT_FALSE(as_client.FakeWorkerIsListed());
  EXPECT_FALSE(as_client.SpoofedReportHidesBlock());
  EXPECT_FALSE(as_client.RemoveRddDeletes());
  // ... nor command a worker.
  EXPECT_FALSE(as_client.ReplicateAccepted());
  EXPECT_FALSE(as_client.DecommissionAccepted());
  EXPECT_FALSE(as_client.ShutdownStopsWorker());
  Result<IncomingMessage> shutdown =
      RawCall(context_, cluster_.worker_endpoint("w1"), cluster_.SecurityOf("client", "w1"),
              [](proto::Request::Builder r) { r.setShutdown(); });
  EXPECT_EQ(shutdown.status().code(), StatusCode::kPermissionDenied)
      << shutdown.status().ToString();
  EXPECT_TRUE(cluster_.worker_process("w1").Running());

  // A worker key speaks only for its own worker id.
  Attacks as_w1{this, cluster_, context_, cluster_.SecurityOf("w1", "master"), {}};
  EXPECT_FALSE(as_w1.TakesOverWorkerEntry());
  EXPECT_FALSE(as_w1.FakeWorkerIsListed());
  Result<IncomingMessage> heartbeat =
      RawCall(context_, cluster_.master_endpoint(), cluster_.SecurityOf("w1", "master"),
              [](proto::Request::Builder r) { r.initHeartbeat().setWorkerId("w2"); });
  EXPECT_EQ(heartbeat.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(heartbeat.status().message().find("may not speak for worker 'w2'"), std::string::npos)
      << heartbeat.status().message();
  EXPECT_EQ(cluster_.ListedWorkers(), (std::vector<std::string>{"w1", "w2"}));

  // bmctl: rm-rdd and decommission with a client key are denied, with an admin key they work.
  CommandResult rm_rdd = cluster_.BmctlAs("client", {"rm-rdd", "7"});
  EXPECT_EQ(rm_rdd.exit_code, 1);
  EXPECT_NE(rm_rdd.err.find("permission denied"), std::string::npos) << rm_rdd.err;
  EXPECT_NE(rm_rdd.err.find("only admin keys"), std::string::npos) << rm_rdd.err;
  CommandResult decommission = cluster_.BmctlAs("client", {"decommission", "w2", "--wait", "1"});
  EXPECT_EQ(decommission.exit_code, 1);
  EXPECT_NE(decommission.err.find("permission denied"), std::string::npos) << decommission.err;
  CommandResult get = cluster_.BmctlAs("client", {"get", kBlock});
  EXPECT_EQ(get.exit_code, 0) << get.err;
  EXPECT_EQ(get.out, "payload");
  CommandResult admin_rm = cluster_.BmctlAs("admin", {"rm-rdd", "7"});
  EXPECT_EQ(admin_rm.exit_code, 0) << admin_rm.err;
  EXPECT_TRUE(cluster_.Locations({kBlock})[kBlock].empty());
  CommandResult admin_decommission =
      cluster_.BmctlAs("admin", {"decommission", "w2", "--wait", "30"});
  EXPECT_EQ(admin_decommission.exit_code, 0) << admin_decommission.err;
}

TEST_F(SecurityTest, UnknownClientKeyIsRefusedWithinOneSecond) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(true));
  ASSERT_TRUE(
      GenerateCertificate(outsider_dir_.path().string(), "stranger", KeyRole::kClient).ok());
  ClientOptions options = cluster_.ClientOptionsFor();
  options.key_file = outsider_dir_.Sub("stranger.key_secret");
  Client client(options);
  const auto start = std::chrono::steady_clock::now();
  Result<std::vector<WorkerInfo>> workers = client.Workers();
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(workers.ok());
  EXPECT_EQ(workers.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(
      workers.status().message().find("authentication refused by " + cluster_.master_endpoint()),
      std::string::npos)
      << workers.status().message();
  EXPECT_LT(took, seconds(1));

  CommandResult bmctl = RunCommand(
      BinaryPath("bmctl"), {"--master", cluster_.master_endpoint(), "--key", options.key_file,
                            "--master-key", options.master_key_file, "workers"});
  EXPECT_EQ(bmctl.exit_code, 1);
  EXPECT_NE(bmctl.err.find("authentication refused by " + cluster_.master_endpoint()),
            std::string::npos)
      << bmctl.err;
}

TEST_F(SecurityTest, KeysOnOneSideOnlyAreNamedAsTheProblem) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(true));
  CommandResult keyless =
      RunCommand(BinaryPath("bmctl"), {"--master", cluster_.master_endpoint(), "workers"});
  EXPECT_EQ(keyless.exit_code, 1);
  EXPECT_NE(keyless.err.find("requires keys"), std::string::npos) << keyless.err;

  LocalCluster plain;
  ASSERT_NO_FATAL_FAILURE(plain.StartMaster());
  CommandResult keyed =
      RunCommand(BinaryPath("bmctl"),
                 {"--master", plain.master_endpoint(), "--key", cluster_.SecretKeyFile("client"),
                  "--master-key", cluster_.PublicKeyFile("master"), "workers"});
  EXPECT_EQ(keyed.exit_code, 1);
  EXPECT_NE(keyed.err.find("does not use keys"), std::string::npos) << keyed.err;
}

TEST_F(SecurityTest, WorkerWithUnknownKeyCannotRegister) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(true));
  ASSERT_TRUE(GenerateCertificate(outsider_dir_.path().string(), "w9", KeyRole::kWorker).ok());
  const std::string log = cluster_.dir().Sub("w9.log");
  Process worker = Process::Start(
      BinaryPath("bm-worker"),
      {"--master", cluster_.master_endpoint(), "--listen", LoopbackEndpoint(FreeLoopbackPort()),
       "--memory", "16MiB", "--disk-dir", cluster_.dir().Sub("disk-w9"), "--key",
       outsider_dir_.Sub("w9.key_secret"), "--master-key", cluster_.PublicKeyFile("master"),
       "--allow", cluster_.keys_dir()},
      log);
  // The master logs the refusal of the worker's handshake: then the worker has tried.
  ASSERT_TRUE(WaitFor(
      [&] {
        return ReadFile(cluster_.dir().Sub("master.log")).find("is not allowed") !=
               std::string::npos;
      },
      seconds(10)))
      << cluster_.LogTail("master");
  EXPECT_EQ(cluster_.ListedWorkers(), (std::vector<std::string>{"w1", "w2"}));
  EXPECT_TRUE(worker.Running());
}

TEST_F(SecurityTest, WorkerWithRefusedKeySaysSoOnceAndOnReadyz) {
  cluster_.SetMasterExtraArgs({"--http", "127.0.0.1:0"});
  ASSERT_NO_FATAL_FAILURE(StartCluster(true));
  ASSERT_TRUE(GenerateCertificate(outsider_dir_.path().string(), "w9", KeyRole::kWorker).ok());
  const std::string log = cluster_.dir().Sub("w9.log");
  const int http_port = FreeLoopbackPort();
  Process worker = Process::Start(
      BinaryPath("bm-worker"),
      {"--master", cluster_.master_endpoint(), "--listen", LoopbackEndpoint(FreeLoopbackPort()),
       "--memory", "16MiB", "--disk-dir", cluster_.dir().Sub("disk-w9"), "--key",
       outsider_dir_.Sub("w9.key_secret"), "--master-key", cluster_.PublicKeyFile("master"),
       "--allow", cluster_.keys_dir(), "--http", "127.0.0.1:" + std::to_string(http_port)},
      log);
  const std::string refusal = "authentication refused by " + cluster_.master_endpoint();
  ASSERT_TRUE(
      WaitFor([&] { return ReadFile(log).find(refusal) != std::string::npos; }, seconds(10)))
      << ReadFile(log);
  // Retries go on (the key may be allowed later: three are seen by the master) but the error
  // is said once, as an error.
  const auto refusals_seen = [&] {
    httplib::Client master_http("127.0.0.1", cluster_.HttpPort("master"));
    httplib::Result metrics = master_http.Get("/metrics");
    if (!metrics) return 0.0;
    const std::string name = "blockmgr_handshakes_refused_total{reason=\"unknown_key\"} ";
    const size_t at = metrics->body.find(name);
    return at == std::string::npos ? 0.0 : std::atof(metrics->body.c_str() + at + name.size());
  };
  ASSERT_TRUE(WaitFor([&] { return refusals_seen() >= 3; }, seconds(20)))
      << cluster_.LogTail("master");
  const std::string text = ReadFile(log);
  const size_t first = text.find(refusal);
  EXPECT_EQ(text.find(refusal, first + 1), std::string::npos) << text;
  EXPECT_NE(text.rfind("error", first), std::string::npos);
  httplib::Client http("127.0.0.1", http_port);
  httplib::Result ready = http.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
  EXPECT_NE(ready->body.find(refusal), std::string::npos) << ready->body;
  EXPECT_TRUE(worker.Running());
}

TEST_F(SecurityTest, RevokedKeyIsRefusedAfterSighup) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(true));
  CommandResult before = cluster_.BmctlAs("client", {"workers"});
  ASSERT_EQ(before.exit_code, 0) << before.err;
  std::filesystem::remove(cluster_.PublicKeyFile("client"));
  cluster_.master_process().Signal(SIGHUP);
  // A fresh connection after the reload is refused; the reload takes a moment to be read.
  EXPECT_TRUE(WaitFor(
      [&] {
        CommandResult after = cluster_.BmctlAs("client", {"workers"});
        return after.exit_code == 1 &&
               after.err.find("authentication refused") != std::string::npos;
      },
      seconds(10)));
  EXPECT_TRUE(cluster_.master_process().Running());
  CommandResult admin = cluster_.BmctlAs("admin", {"workers"});
  EXPECT_EQ(admin.exit_code, 0) << admin.err;
}

// A restarted master vouches for the workers' keys from its journal, before they register
// again: clients can reach the blocks a worker holds as soon as the master answers.
TEST_F(SecurityTest, RestartedMasterVouchesForJournaledWorkerKeys) {
  if (!CurveAvailable()) GTEST_SKIP() << "libzmq was built without CURVE (libsodium)";
  cluster_.SetMasterStateDir(cluster_.dir().Sub("master-state"));
  ASSERT_NO_FATAL_FAILURE(StartCluster(true));
  ASSERT_NO_FATAL_FAILURE(PutBlock("journaled payload"));
  const std::string w1_key = LoadCertificate(cluster_.PublicKeyFile("w1"))->public_key;

  // Stopped, the workers cannot register again before the master's answers are checked.
  cluster_.KillMaster();
  cluster_.SignalWorker("w1", SIGSTOP);
  cluster_.SignalWorker("w2", SIGSTOP);
  ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
  Result<IncomingMessage> reply = RawCall(
      context_, cluster_.master_endpoint(), cluster_.SecurityOf("client", "master"),
      [](proto::Request::Builder r) { r.initGetLocations().initBlockIds(1).set(0, kBlock); });
  cluster_.SignalWorker("w1", SIGCONT);
  cluster_.SignalWorker("w2", SIGCONT);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  auto locations = reply->reply().getLocations();
  ASSERT_EQ(locations.size(), 1u);
  ASSERT_EQ(locations[0].getLocations().size(), 1u);
  EXPECT_EQ(std::string(locations[0].getLocations()[0].getWorkerId().cStr()), "w1");
  EXPECT_EQ(std::string(locations[0].getLocations()[0].getPublicKey().cStr()), w1_key);

  CommandResult get = cluster_.BmctlAs("client", {"get", kBlock});
  EXPECT_EQ(get.exit_code, 0) << get.err;
  EXPECT_EQ(get.out, "journaled payload");
}

// ---- limits per key ----

TEST_F(SecurityTest, OneKeyOverItsConnectionLimitIsRefusedWhileOtherKeysGetIn) {
  cluster_.SetMasterExtraArgs({"--max-connections-per-key", "3", "--http", "127.0.0.1:0"});
  ASSERT_NO_FATAL_FAILURE(StartCluster(true));
  const ChannelSecurity client = cluster_.SecurityOf("client", "master");
  const auto ping = [&](RpcChannel& channel) {
    capnp::MallocMessageBuilder request;
    request.initRoot<proto::Request>().setPing();
    return channel.Call(request);
  };
  std::vector<std::unique_ptr<RpcChannel>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(
        std::make_unique<RpcChannel>(context_, cluster_.master_endpoint(), seconds(3), client));
    Result<IncomingMessage> reply = ping(*held.back());
    ASSERT_TRUE(reply.ok()) << i << ": " << reply.status().ToString();
  }
  RpcChannel fourth(context_, cluster_.master_endpoint(), seconds(3), client);
  Result<IncomingMessage> refused = ping(fourth);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("holds the most connections one key may have open"),
            std::string::npos)
      << refused.status().ToString();
  // Other keys are not affected.
  CommandResult admin = cluster_.BmctlAs("admin", {"workers"});
  EXPECT_EQ(admin.exit_code, 0) << admin.err;
  EXPECT_TRUE(cluster_.master_process().Running());

  // A connection closed makes room again once the master has seen it close.
  held.pop_back();
  EXPECT_TRUE(WaitFor(
      [&] {
        RpcChannel again(context_, cluster_.master_endpoint(), seconds(3), client);
        return ping(again).ok();
      },
      seconds(10)))
      << cluster_.LogTail("master");
  EXPECT_NE(ReadFile(cluster_.dir().Sub("master.log")).find("holds the most connections"),
            std::string::npos);
  httplib::Client http("127.0.0.1", cluster_.HttpPort("master"));
  httplib::Result metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics) << "no /metrics";
  EXPECT_EQ(
      metrics->body.find("blockmgr_handshakes_refused_total{reason=\"connections_per_key\"} 0"),
      std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("blockmgr_handshakes_refused_total{reason=\"connections_per_key\"}"),
            std::string::npos)
      << metrics->body;
}

// A connection that authenticates with `security` and never sends anything, with the monitor
// that tells how its handshake ended.
struct SilentConnection {
  SilentConnection(zmq::context_t& context, const std::string& endpoint,
                   const ChannelSecurity& security)
      : socket(context, zmq::socket_type::dealer) {
    EXPECT_TRUE(ConfigureClientSocket(socket, security, endpoint).ok());
    static int next_id = 0;
    Result<std::unique_ptr<PeerMonitor>> created =
        PeerMonitor::Create(context, socket, "silent-" + std::to_string(next_id++),
                            ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    if (created.ok()) monitor = std::move(created).value();
    socket.connect(endpoint);
  }
  ~SilentConnection() { monitor.reset(); }  // before the socket it monitors

  // 200 once the handshake succeeded, the ZAP status it was refused with, or 0 if it did not
  // end within `timeout`.
  int Handshake(milliseconds timeout = seconds(10)) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (monitor && std::chrono::steady_clock::now() < until) {
      for (const PeerMonitor::Event& event : monitor->TakeEvents()) {
        if (event.kind == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) return 200;
        if (event.kind == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) return static_cast<int>(event.value);
      }
      zmq::pollitem_t item{monitor->socket().handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, milliseconds(100));
    }
    return 0;
  }

  zmq::socket_t socket;
  std::unique_ptr<PeerMonitor> monitor;
};

// A client key could take 100 descriptors from the master with connections that authenticate
// and never send a request: they were counted against the key only from their first request.
TEST_F(SecurityTest, SeventeenthSilentConnectionOfAKeyLimitedTo16IsRefused) {
  if (!CurveAvailable()) GTEST_SKIP() << "libzmq was built without CURVE (libsodium)";
  ASSERT_NO_FATAL_FAILURE(cluster_.UseKeys({"w1"}));
  cluster_.SetMasterExtraArgs({"--max-connections-per-key", "16"});
  ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
  const ChannelSecurity client = cluster_.SecurityOf("client", "master");
  const std::string endpoint = cluster_.master_endpoint();
  // Opens a silent connection and waits until its handshake succeeds; the master may need a
  // moment to see a connection close, and refuses new ones until then.
  const auto open_one = [&]() -> std::unique_ptr<SilentConnection> {
    std::unique_ptr<SilentConnection> connection;
    EXPECT_TRUE(WaitFor(
        [&] {
          connection = std::make_unique<SilentConnection>(context_, endpoint, client);
          return connection->Handshake() == 200;
        },
        seconds(10)));
    return connection;
  };

  std::vector<std::unique_ptr<SilentConnection>> silent;
  for (int i = 0; i < 16; ++i) {
    silent.push_back(std::make_unique<SilentConnection>(context_, endpoint, client));
    ASSERT_EQ(silent.back()->Handshake(), 200) << "connection " << i + 1;
  }
  SilentConnection seventeenth(context_, endpoint, client);
  EXPECT_EQ(seventeenth.Handshake(), 500);
  // Other keys are not affected.
  RpcChannel admin(context_, endpoint, seconds(3), cluster_.SecurityOf("admin", "master"));
  capnp::MallocMessageBuilder ping;
  ping.initRoot<proto::Request>().setPing();
  Result<IncomingMessage> pong = admin.Call(ping);
  EXPECT_TRUE(pong.ok()) << pong.status().ToString();

  // One closes: exactly one more gets in, and the refusals in between left no count behind.
  silent.erase(silent.begin());
  silent.push_back(open_one());
  SilentConnection another(context_, endpoint, client);
  EXPECT_EQ(another.Handshake(), 500);

  // All close: a whole new sixteen get in, and the seventeenth is refused again.
  silent.clear();
  for (int i = 0; i < 16; ++i) silent.push_back(open_one());
  SilentConnection over(context_, endpoint, client);
  EXPECT_EQ(over.Handshake(), 500);
  EXPECT_TRUE(cluster_.master_process().Running());
}

TEST_F(SecurityTest, WorkersLimitConnectionsPerKeyToo) {
  if (!CurveAvailable()) GTEST_SKIP() << "libzmq was built without CURVE (libsodium)";
  ASSERT_NO_FATAL_FAILURE(cluster_.UseKeys({"w1"}));
  ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster_.StartWorker(
      {"w1", "64MiB", "", {"--max-connections-per-key", "2", "--io-threads", "2"}}));
  const ChannelSecurity client = cluster_.SecurityOf("client", "w1");
  const auto ping = [&](RpcChannel& channel) {
    capnp::MallocMessageBuilder request;
    request.initRoot<proto::Request>().setPing();
    return channel.Call(request);
  };
  RpcChannel first(context_, cluster_.worker_endpoint("w1"), seconds(3), client);
  RpcChannel second(context_, cluster_.worker_endpoint("w1"), seconds(3), client);
  ASSERT_TRUE(ping(first).ok());
  ASSERT_TRUE(ping(second).ok());
  RpcChannel third(context_, cluster_.worker_endpoint("w1"), seconds(3), client);
  Result<IncomingMessage> refused = ping(third);
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status().ToString();
  // Other keys are not affected.
  RpcChannel admin(context_, cluster_.worker_endpoint("w1"), seconds(3),
                   cluster_.SecurityOf("admin", "w1"));
  EXPECT_TRUE(ping(admin).ok());
  CommandResult put = cluster_.BmctlAs(
      "admin", {"put", kBlock, "-", "--level", "MEMORY_ONLY", "--worker", "w1"}, "bytes");
  EXPECT_EQ(put.exit_code, 0) << put.err;
  CommandResult get = cluster_.BmctlAs("admin", {"get", kBlock});
  EXPECT_EQ(get.exit_code, 0) << get.err;
  EXPECT_EQ(get.out, "bytes");
  EXPECT_TRUE(cluster_.worker_process("w1").Running());
}

// Issue 32, item 4: a key whose connection closed while it held all its upload slots was
// refused ("... uploads in progress") until the worker restarted, although the worker had
// aborted every one of those uploads.
TEST_F(SecurityTest, KeyPutsAgainAtOnceAfterClosingAConnectionThatHeldAllItsUploadSlots) {
  if (!CurveAvailable()) GTEST_SKIP() << "libzmq was built without CURVE (libsodium)";
  ASSERT_NO_FATAL_FAILURE(cluster_.UseKeys({"w1"}));
  ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
  ASSERT_NO_FATAL_FAILURE(
      cluster_.StartWorker({"w1", "64MiB", "", {"--max-uploads-per-key", "4"}}));
  const auto start_upload = [](RpcChannel& channel, uint64_t upload_id) {
    capnp::MallocMessageBuilder request;
    proto::PutBlock::Builder put = request.initRoot<proto::Request>().initPutBlock();
    put.setBlockId("rdd_9_" + std::to_string(upload_id));
    put.setLevel(proto::StorageLevel::MEMORY_ONLY);
    put.setTotalSize(1 << 20);
    put.setOffset(0);
    put.setLast(false);
    put.setUploadId(upload_id);
    std::vector<zmq::message_t> piece;
    piece.emplace_back(4096);
    return channel.Call(request, std::move(piece));
  };
  {
    RpcChannel channel(context_, cluster_.worker_endpoint("w1"), seconds(5),
                       cluster_.SecurityOf("client", "w1"));
    for (uint64_t upload = 1; upload <= 4; ++upload) {
      Result<IncomingMessage> started = start_upload(channel, upload);
      ASSERT_TRUE(started.ok()) << started.status().ToString();
    }
    Result<IncomingMessage> fifth = start_upload(channel, 5);
    ASSERT_EQ(fifth.status().code(), StatusCode::kUnavailable) << fifth.status().ToString();
    EXPECT_NE(fifth.status().message().find("uploads in progress"), std::string::npos)
        << fifth.status().ToString();
  }  // the connection closes with its four uploads in progress
  // The worker has seen the close once it has aborted the four uploads.
  const std::string log = cluster_.dir().Sub("w1.log");
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string text = ReadFile(log);
        size_t aborted = 0;
        for (size_t at = text.find("its client disconnected"); at != std::string::npos;
             at = text.find("its client disconnected", at + 1)) {
          ++aborted;
        }
        return aborted >= 4;
      },
      std::chrono::seconds(10)))
      << cluster_.LogTail("w1");
  CommandResult put = cluster_.BmctlAs(
      "client", {"put", kBlock, "-", "--level", "MEMORY_ONLY", "--worker", "w1"}, "bytes");
  EXPECT_EQ(put.exit_code, 0) << put.err;
}

// 10,000 registrations against the master: without keys each new id costs the master a socket
// (the attack works); with keys an outsider is refused at the handshake, a worker key may not
// register other ids, and its own re-registrations are limited, so descriptors stay bounded.
TEST_F(SecurityTest, TenThousandFakeRegistrationsExhaustDescriptorsOnlyWithoutKeys) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(false));
  const pid_t master = cluster_.master_process().pid();
  const int before = OpenDescriptors(master);
  ASSERT_GT(before, 0);
  // The most the master held during the storm: fake workers it drops (their heartbeats never
  // come) close theirs meanwhile, the sooner the slower the storm runs (under a sanitizer).
  int peak = before;
  const auto grown = [&] {
    const int now = OpenDescriptors(master);
    if (now < 0) return true;  // the master ran out of them, or died of it
    peak = std::max(peak, now);
    return now > before + 5000;
  };
  RegistrationStorm(
      context_, cluster_.master_endpoint(), {}, 10000,
      [](int i) { return "fake-" + std::to_string(i); }, "tcp://127.0.0.1:9", grown);
  std::printf("[ attack ] master descriptors %d -> at most %d\n", before, peak);
  // Thousands, where with keys the same storm leaves fewer than 50 (the next test).
  EXPECT_GT(peak, before + 2000) << "descriptors: " << before << " -> at most " << peak;
}

TEST_F(SecurityTest, MasterSurvivesTenThousandRegistrationAttemptsWithKeys) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(true));
  const pid_t master = cluster_.master_process().pid();
  const int before = OpenDescriptors(master);
  ASSERT_GT(before, 0);

  // 10 outsiders, each on a connection of its own (each waits for its refusal).
  const ChannelSecurity outsider = OutsiderKeys("master");
  for (int i = 0; i < 10; ++i) {
    Result<IncomingMessage> reply =
        RawCall(context_, cluster_.master_endpoint(), outsider, [i](proto::Request::Builder r) {
          auto reg = r.initRegisterWorker();
          reg.setWorkerId("outsider-" + std::to_string(i));
          reg.setAddress("tcp://127.0.0.1:9");
          reg.initStats();
        });
    ASSERT_EQ(reply.status().code(), StatusCode::kPermissionDenied) << reply.status().ToString();
  }
  // w1's key: 4,995 other ids, then 4,995 registrations of its own id.
  const ChannelSecurity w1 = cluster_.SecurityOf("w1", "master");
  std::map<int, int> others = RegistrationStorm(
      context_, cluster_.master_endpoint(), w1, 4995,
      [](int i) { return "fake-" + std::to_string(i); }, "tcp://127.0.0.1:9");
  EXPECT_EQ(others[static_cast<int>(StatusCode::kPermissionDenied)], 4995);
  const auto storm_start = std::chrono::steady_clock::now();
  std::map<int, int> own = RegistrationStorm(
      context_, cluster_.master_endpoint(), w1, 4995, [](int) { return "w1"; },
      cluster_.worker_endpoint("w1"));
  // The limit is a bucket of 60 that refills one a second: the storm gets the bucket and what
  // refilled while it ran (a second or two here, more under a sanitizer: 61 once).
  const int refilled = static_cast<int>(
      std::chrono::ceil<std::chrono::seconds>(std::chrono::steady_clock::now() - storm_start)
          .count());
  EXPECT_LE(own[static_cast<int>(StatusCode::kOk)], 60 + refilled);
  EXPECT_GE(own[static_cast<int>(StatusCode::kUnavailable)], 4995 - 60 - refilled);

  EXPECT_TRUE(cluster_.master_process().Running());
  const int after = OpenDescriptors(master);
  std::printf("[ storm ] master descriptors %d -> %d\n", before, after);
  EXPECT_LT(after, before + 50) << "descriptors: " << before << " -> " << after;
  EXPECT_EQ(cluster_.ListedWorkers(), (std::vector<std::string>{"w1", "w2"}));
  EXPECT_NE(ReadFile(cluster_.dir().Sub("master.log")).find("refused a registration"),
            std::string::npos);
  CommandResult admin = cluster_.BmctlAs("admin", {"workers"});
  EXPECT_EQ(admin.exit_code, 0) << admin.err;
}

TEST_F(SecurityTest, PutAndGetWorkWithKeys) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(true));
  std::string bytes(3 << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 % 251);
  CommandResult put = cluster_.BmctlAs(
      "client", {"put", kBlock, "-", "--level", "MEMORY_ONLY", "--worker", "w1"}, bytes);
  ASSERT_EQ(put.exit_code, 0) << put.err;
  CommandResult get = cluster_.BmctlAs("client", {"get", kBlock});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  EXPECT_TRUE(get.out == bytes);
  // Draining w1 exercises the rest: the master commands w1 (master key), w1 copies the block
  // to w2 (worker key, w2's key as the master vouched for it), then the master stops w1.
  CommandResult drained = cluster_.Bmctl({"decommission", "w1", "--wait", "30"});
  ASSERT_EQ(drained.exit_code, 0) << drained.err;
  CommandResult again = cluster_.BmctlAs("client", {"get", kBlock});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(again.out == bytes);
  auto where = cluster_.Locations({kBlock})[kBlock];
  ASSERT_EQ(where.size(), 1u);
  EXPECT_EQ(std::get<0>(where[0]), "w2");
}

// The bytes on the wire: relayed through a proxy the test reads, a block's contents must not
// appear with keys on, and do appear without keys (so the check can fail).
class WireTest : public SecurityTest, public ::testing::WithParamInterface<bool> {};

TEST_P(WireTest, BlockBytesAreEncryptedOnTheWireOnlyWithKeys) {
  const bool keys = GetParam();
  if (keys) {
    if (!CurveAvailable()) GTEST_SKIP() << "libzmq was built without CURVE (libsodium)";
    ASSERT_NO_FATAL_FAILURE(cluster_.UseKeys({"w1"}));
  }
  ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
  TcpProxy proxy(FreeLoopbackPort());
  ASSERT_NO_FATAL_FAILURE(cluster_.StartWorkerBehind(proxy, {"w1", "64MiB", ""}));
  const std::string marker = "known-block-bytes-0123456789-";
  std::string bytes;
  while (bytes.size() < (256 << 10)) bytes += marker;
  ASSERT_NO_FATAL_FAILURE(PutBlock(bytes));
  // Over TCP: a read through shared memory puts no byte on any wire.
  CommandResult get = cluster_.Bmctl({"get", kBlock, "--no-local-reads"});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  ASSERT_TRUE(get.out == bytes);
  const std::string wire = proxy.Captured();
  ASSERT_GT(wire.size(), 2 * bytes.size()) << "the block did not pass through the proxy";
  if (keys) {
    EXPECT_EQ(wire.find(marker), std::string::npos);
  } else {
    EXPECT_NE(wire.find(marker), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(KeysOnAndOff, WireTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Keys" : "Insecure"; });

TEST(SecureStartTest, NonLoopbackWithoutKeyRefusesToStartUnlessInsecure) {
  TempDir dir;
  CommandResult refused =
      RunCommand(BinaryPath("bm-master"), {"--listen", "tcp://0.0.0.0:*"}, "", seconds(10));
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("without keys"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--insecure"), std::string::npos) << refused.err;
  CommandResult worker =
      RunCommand(BinaryPath("bm-worker"),
                 {"--master", "tcp://127.0.0.1:1", "--listen", "tcp://0.0.0.0:*", "--advertise",
                  "tcp://10.1.2.3:7000", "--memory", "1MiB", "--disk-dir", dir.Sub("d")},
                 "", seconds(10));
  EXPECT_EQ(worker.exit_code, 2);
  EXPECT_NE(worker.err.find("without keys"), std::string::npos) << worker.err;
}

TEST(KeygenTest, WritesZeroMqCertificatesWithTheSecretPrivate) {
  if (!CurveAvailable()) GTEST_SKIP() << "libzmq was built without CURVE (libsodium)";
  TempDir dir;
  CommandResult made =
      RunCommand(BinaryPath("bmctl"), {"keygen", "w7", "--role", "worker", "--out", dir.Sub("k")});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::string public_text = ReadFile(dir.Sub("k/w7.key"));
  const std::string secret_text = ReadFile(dir.Sub("k/w7.key_secret"));
  EXPECT_NE(public_text.find("metadata\n"), std::string::npos);
  EXPECT_NE(public_text.find("    role = \"worker\""), std::string::npos);
  EXPECT_NE(public_text.find("curve\n    public-key = \""), std::string::npos);
  EXPECT_EQ(public_text.find("secret-key"), std::string::npos);
  EXPECT_NE(secret_text.find("    secret-key = \""), std::string::npos);
  struct stat info {};
  ASSERT_EQ(::stat(dir.Sub("k/w7.key_secret").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  Result<Certificate> cert = LoadCertificate(dir.Sub("k/w7.key_secret"));
  ASSERT_TRUE(cert.ok()) << cert.status().ToString();
  EXPECT_EQ(cert->name(), "w7");
  EXPECT_EQ(cert->role().value(), KeyRole::kWorker);
  // Never overwrites a key.
  CommandResult again =
      RunCommand(BinaryPath("bmctl"), {"keygen", "w7", "--role", "worker", "--out", dir.Sub("k")});
  EXPECT_EQ(again.exit_code, 1);
}

}  // namespace
}  // namespace bm::testing
