// Slow HTTP clients against real bm-master and bm-worker processes (--http): connections that
// send half a request and then wait must not take the probes away from Kubernetes.

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/local_cluster.h"

namespace bm::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A connection to 127.0.0.1:port that has sent the first half of a request and waits; -1 if it
// could not connect within two seconds (a server whose accept queue is full may not complete
// the handshake at once).
int HalfRequest(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 &&
      errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  pollfd writable{fd, POLLOUT, 0};
  if (::poll(&writable, 1, 2000) != 1 || (writable.revents & POLLOUT) == 0) {
    ::close(fd);
    return -1;
  }
  const std::string half = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
  (void)::send(fd, half.data(), half.size(), MSG_NOSIGNAL);
  return fd;
}

// How long GET `path` took to answer 200, or nothing if it did not within `limit`.
std::optional<milliseconds> TimedGet(int port, const std::string& path, milliseconds limit) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(limit);
  client.set_read_timeout(limit);
  client.set_write_timeout(limit);
  const Clock::time_point start = Clock::now();
  httplib::Result result = client.Get(path);
  const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  if (!result || result->status != 200 || took > limit) return std::nullopt;
  return took;
}

class HttpSlowClientsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.SetMasterExtraArgs({"--http", "127.0.0.1:0"});
    ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
    WorkerSpec spec;
    spec.id = "w1";
    spec.extra_args = {"--http", "127.0.0.1:0"};
    ASSERT_NO_FATAL_FAILURE(cluster_.StartWorker(spec));
    ports_ = {{"master", cluster_.HttpPort("master")}, {"w1", cluster_.HttpPort("w1")}};
    for (const auto& [name, port] : ports_) ASSERT_GT(port, 0) << cluster_.LogTail(name);
  }

  void TearDown() override {
    for (int fd : slow_) ::close(fd);
  }

  LocalCluster cluster_;
  std::vector<std::pair<std::string, int>> ports_;
  std::vector<int> slow_;  // held open until the test ends
};

// Twenty such connections made /healthz unanswerable for about 48 s: each held one of the few
// threads of the HTTP pool until its read timed out, and the probes queued behind them.
TEST_F(HttpSlowClientsTest, HealthzAnswersWhile200SlowClientsHoldConnections) {
  constexpr int kSlowClients = 200;
  constexpr milliseconds kProbeLimit{1000};
  for (const auto& [name, port] : ports_) {
    for (int i = 0; i < kSlowClients; ++i) {
      const int fd = HalfRequest(port);
      if (fd >= 0) slow_.push_back(fd);
    }
  }
  // Probed ten times over 2.5 s, while the slow connections are within their read deadline.
  milliseconds worst{0};
  int probes = 0;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) std::this_thread::sleep_for(milliseconds(250));  // pacing, not waiting
    for (const auto& [name, port] : ports_) {
      for (const char* path : {"/healthz", "/readyz"}) {
        std::optional<milliseconds> took = TimedGet(port, path, kProbeLimit);
        ASSERT_TRUE(took) << name << " did not answer " << path << " within " << kProbeLimit.count()
                          << " ms while " << kSlowClients << " slow clients held connections";
        worst = std::max(worst, *took);
        ++probes;
      }
    }
  }
  std::printf("%d probes with %d slow clients per server; slowest answer %lld ms\n", probes,
              kSlowClients, static_cast<long long>(worst.count()));
  EXPECT_TRUE(cluster_.master_process().Running());
  EXPECT_TRUE(cluster_.worker_process("w1").Running());
}

}  // namespace
}  // namespace bm::testing
