#include "tests/support/zookeeper_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>

#include "tests/support/files.h"

namespace bm::testing {
namespace {

constexpr char kZooKeeperJar[] = "/usr/share/java/zookeeper.jar";
// Gives the server's log a destination (without it slf4j drops every line).
constexpr char kLoggerJar[] = "/usr/share/java/slf4j-simple.jar";
constexpr auto kStartTimeout = std::chrono::seconds(60);

// Sends `word` to address:port and reads until the server closes, for at most `timeout`.
std::string FourLetterWord(const std::string& address, int port, const std::string& word,
                           std::chrono::milliseconds timeout) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) return "";
  addr.sin_port = htons(static_cast<uint16_t>(port));
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  std::string answer;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      send(fd, word.data(), word.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(word.size())) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd pfd{fd, POLLIN, 0};
      if (poll(&pfd, 1, static_cast<int>(left.count())) <= 0) break;
      char buffer[4096];
      ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      answer.append(buffer, static_cast<size_t>(n));
    }
  }
  close(fd);
  return answer;
}

}  // namespace

bool ZooKeeperServer::Available() {
  return !FindOnPath("java").empty() && std::filesystem::exists(kZooKeeperJar);
}

Result<std::unique_ptr<ZooKeeperServer>> ZooKeeperServer::Start(ZooKeeperServerOptions options) {
  if (!Available()) return UnavailableError(kNotInstalled);
  std::unique_ptr<ZooKeeperServer> server(new ZooKeeperServer(options));
  // A port taken between choosing and binding it makes the server exit: choose again.
  Status status;
  for (int attempt = 0; attempt < 3; ++attempt) {
    server->port_ = FreeLoopbackPort();
    status = server->Launch();
    if (status.ok()) return server;
  }
  return status;
}

ZooKeeperServer::ZooKeeperServer(ZooKeeperServerOptions options)
    : options_(options), log_path_(dir_.Sub("zookeeper.log")) {}

ZooKeeperServer::~ZooKeeperServer() {
  if (process_) {
    Resume();
    process_->Kill();
  }
}

std::string ZooKeeperServer::connect_string() const {
  return options_.address + ":" + std::to_string(port_);
}

Status ZooKeeperServer::Launch() {
  std::filesystem::create_directories(dir_.Sub("data"));
  const std::string config = dir_.Sub("zoo.cfg");
  WriteFile(config, "tickTime=" + std::to_string(options_.tick_ms) +
                        "\n"
                        "dataDir=" +
                        dir_.Sub("data") +
                        "\n"
                        "clientPort=" +
                        std::to_string(port_) +
                        "\n"
                        "clientPortAddress=" +
                        options_.address +
                        "\n"
                        "minSessionTimeout=" +
                        std::to_string(options_.min_session_timeout_ms) +
                        "\n"
                        "maxSessionTimeout=" +
                        std::to_string(options_.max_session_timeout_ms) +
                        "\n"
                        "admin.enableServer=false\n"
                        "4lw.commands.whitelist=ruok,srvr,wchp,wchc,cons\n"
                        // Keep test runs light: no snapshots worth speaking of, no purges.
                        "snapCount=100000\n"
                        "autopurge.purgeInterval=0\n");
  std::string classpath = kZooKeeperJar;
  if (std::filesystem::exists(kLoggerJar)) classpath += std::string(":") + kLoggerJar;
  BM_ASSIGN_OR_RETURN(Process process,
                      Process::Spawn(FindOnPath("java"),
                                     {"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                                      "-Dzookeeper.jmx.log4j.disable=true", "-cp", classpath,
                                      "org.apache.zookeeper.server.quorum.QuorumPeerMain", config},
                                     log_path_));
  process_.emplace(std::move(process));
  bool serving = WaitFor([&] { return !process_->Running() || Serving(); }, kStartTimeout);
  if (serving && process_->Running()) return Status::Ok();
  process_->Kill();
  process_.reset();
  return UnavailableError("ZooKeeper on port " + std::to_string(port_) +
                          " did not start serving; see " + log_path_);
}

bool ZooKeeperServer::Serving() const {
  // "srvr" answers "This ZooKeeper instance is not currently serving requests" until ready.
  return Command("srvr").find("Mode: standalone") != std::string::npos;
}

void ZooKeeperServer::Stop() {
  if (process_) process_->Stop();
  process_.reset();
}

void ZooKeeperServer::Kill() {
  if (process_) process_->Kill();
  process_.reset();
}

void ZooKeeperServer::Pause() {
  if (process_) process_->Signal(SIGSTOP);
}

void ZooKeeperServer::Resume() {
  if (process_) process_->Signal(SIGCONT);
}

Status ZooKeeperServer::Restart() {
  Stop();
  return Launch();
}

bool ZooKeeperServer::Running() { return process_ && process_->Running(); }

std::string ZooKeeperServer::Command(const std::string& word) const {
  return FourLetterWord(options_.address, port_, word, std::chrono::seconds(1));
}

}  // namespace bm::testing
