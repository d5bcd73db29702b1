#include "tests/support/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace bm::testing {
namespace {

std::vector<char*> Argv(const std::string& binary, const std::vector<std::string>& args) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  return argv;
}

int DecodeWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

std::string BinaryPath(const std::string& name) { return std::string(BM_BIN_DIR) + "/" + name; }

std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = dir + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    throw std::runtime_error("bind failed");
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string LoopbackEndpoint(int port) { return "tcp://127.0.0.1:" + std::to_string(port); }

bool PortAcceptsConnections(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Result<Process> Process::Spawn(const std::string& binary, const std::vector<std::string>& args,
                               const std::string& log_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> argv = Argv(binary, args);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return InternalError("cannot start " + binary + ": " + std::strerror(rc));
  return Process(pid);
}

Process Process::Start(const std::string& binary, const std::vector<std::string>& args,
                       const std::string& log_path) {
  Result<Process> process = Spawn(binary, args, log_path);
  if (!process.ok()) throw std::runtime_error(process.status().message());
  return std::move(process).value();
}

Process::Process(Process&& other) noexcept : pid_(other.pid_), exit_code_(other.exit_code_) {
  other.pid_ = -1;
}

Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    Kill();
    pid_ = other.pid_;
    exit_code_ = other.exit_code_;
    other.pid_ = -1;
  }
  return *this;
}

Process::~Process() { Kill(); }

bool Process::Running() {
  if (pid_ < 0 || exit_code_) return false;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exit_code_ = DecodeWaitStatus(status);
    return false;
  }
  return r == 0;
}

void Process::Signal(int signal) {
  if (Running()) kill(pid_, signal);
}

std::optional<int> Process::Wait(std::chrono::milliseconds timeout) {
  if (pid_ < 0) return exit_code_;
  WaitFor([&] { return !Running(); }, timeout);
  return exit_code_;
}

void Process::Stop(std::chrono::milliseconds grace) {
  if (grace.count() > 0 && Running()) {
    kill(pid_, SIGTERM);
    Wait(grace);
  }
  Kill();
}

void Process::Kill() {
  if (pid_ < 0) return;
  if (Running()) {
    kill(pid_, SIGKILL);
    int status = 0;
    if (waitpid(pid_, &status, 0) == pid_) exit_code_ = DecodeWaitStatus(status);
  }
  pid_ = -1;
}

Result<CommandResult> RunCommand(const Command& command) {
  const bool capture_err = command.stderr_log.empty();
  int in_pipe[2], out_pipe[2], err_pipe[2] = {-1, -1};
  if (pipe2(in_pipe, O_CLOEXEC) != 0) return InternalError("pipe failed");
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || (capture_err && pipe2(err_pipe, O_CLOEXEC) != 0)) {
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) {
      if (fd >= 0) close(fd);
    }
    return InternalError("pipe failed");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  if (capture_err) {
    posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, command.stderr_log.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
  }
  std::vector<char*> argv = Argv(command.binary, command.args);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, command.binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(in_pipe[0]);
  close(out_pipe[1]);
  if (capture_err) close(err_pipe[1]);
  if (rc != 0) {
    close(in_pipe[1]);
    close(out_pipe[0]);
    if (capture_err) close(err_pipe[0]);
    return InternalError("cannot start " + command.binary + ": " + std::strerror(rc));
  }

  const std::string& input = command.input;
  CommandResult result;
  size_t written = 0;
  if (input.empty()) {
    close(in_pipe[1]);
    in_pipe[1] = -1;
  } else {
    // A command that exits without reading all its input must not kill this process.
    signal(SIGPIPE, SIG_IGN);
    fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
  }
  const auto deadline = std::chrono::steady_clock::now() + command.timeout;
  bool timed_out = false;
  bool out_open = true, err_open = capture_err;
  char buf[65536];
  while (out_open || err_open) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      kill(pid, SIGKILL);
      timed_out = true;
      break;
    }
    pollfd fds[3] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}, {in_pipe[1], POLLOUT, 0}};
    int nfds = in_pipe[1] >= 0 ? 3 : 2;
    if (!out_open) fds[0].fd = -1;
    if (!err_open) fds[1].fd = -1;
    if (poll(fds, nfds, static_cast<int>(left.count())) < 0) continue;
    if (fds[0].revents) {
      ssize_t n = read(out_pipe[0], buf, sizeof(buf));
      if (n > 0)
        result.out.append(buf, n);
      else
        out_open = false;
    }
    if (fds[1].revents) {
      ssize_t n = read(err_pipe[0], buf, sizeof(buf));
      if (n > 0)
        result.err.append(buf, n);
      else
        err_open = false;
    }
    if (nfds == 3 && fds[2].revents) {
      ssize_t n = write(in_pipe[1], input.data() + written, input.size() - written);
      if (n > 0) written += n;
      if (n < 0 || written == input.size()) {
        close(in_pipe[1]);
        in_pipe[1] = -1;
      }
    }
  }
  if (in_pipe[1] >= 0) close(in_pipe[1]);
  close(out_pipe[0]);
  if (capture_err) close(err_pipe[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = timed_out ? -1 : DecodeWaitStatus(status);
  return result;
}

CommandResult RunCommand(const std::string& binary, const std::vector<std::string>& args,
                         const std::string& input, std::chrono::milliseconds timeout) {
  Result<CommandResult> result =
      RunCommand(Command{.binary = binary, .args = args, .input = input, .timeout = timeout});
  if (!result.ok()) throw std::runtime_error(result.status().message());
  return std::move(result).value();
}

uint64_t ProcStatusKiB(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1));
  }
  return 0;
}

}  // namespace bm::testing
