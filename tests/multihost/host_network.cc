#include "tests/multihost/host_network.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "tests/support/process.h"

namespace bm::testing {

Result<std::unique_ptr<HostNetwork>> HostNetwork::Create(int hosts) {
  std::unique_ptr<HostNetwork> net(new HostNetwork());
  for (const char* ip : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (std::filesystem::exists(ip)) {
      net->ip_ = ip;
      break;
    }
  }
  if (net->ip_.empty()) return UnavailableError("the `ip` tool (iproute2) is not installed");
  const std::string tag = std::to_string(getpid());
  net->bridge_ = "bmbr" + tag;
  for (int i = 0; i < hosts; ++i) {
    net->namespaces_.push_back("bm-mh-" + tag + "-h" + std::to_string(i));
    net->host_links_.push_back("bm" + tag + "v" + std::to_string(i));
  }

  // The watchdog: once this process is gone, however it went, remove what is left.
  std::string script = "trap '' INT TERM HUP; tail --pid=" + tag + " -f /dev/null; ";
  for (const std::string& ns : net->namespaces_) {
    script += "for p in $(" + net->ip_ + " netns pids " + ns +
              " 2>/dev/null); do kill -9 $p; done; " + net->ip_ + " netns del " + ns +
              " 2>/dev/null; ";
  }
  script += net->ip_ + " link del " + net->bridge_ + " 2>/dev/null; exit 0";
  // setsid -f: in a session of its own, so a Ctrl-C to the test's process group or a kill of
  // the test's process tree leaves it running.
  Process watchdog =
      Process::Start("/usr/bin/setsid", {"-f", "/bin/sh", "-c", script}, "/dev/null");
  if (watchdog.Wait(std::chrono::seconds(10)) != 0) {
    return UnavailableError("cannot start the cleanup watchdog (setsid)");
  }

  BM_RETURN_IF_ERROR(net->Ip({"link", "add", net->bridge_, "type", "bridge"}));
  BM_RETURN_IF_ERROR(net->Ip({"link", "set", net->bridge_, "up"}));
  for (int i = 0; i < hosts; ++i) {
    const std::string& ns = net->namespaces_[i];
    const std::string& link = net->host_links_[i];
    BM_RETURN_IF_ERROR(net->Ip({"netns", "add", ns}));
    BM_RETURN_IF_ERROR(
        net->Ip({"link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns}));
    BM_RETURN_IF_ERROR(net->Ip({"link", "set", link, "master", net->bridge_}));
    BM_RETURN_IF_ERROR(net->Ip({"link", "set", link, "up"}));
    BM_RETURN_IF_ERROR(net->Ip({"-n", ns, "addr", "add", net->address(i) + "/24", "dev", "eth0"}));
    BM_RETURN_IF_ERROR(net->Ip({"-n", ns, "link", "set", "eth0", "up"}));
    BM_RETURN_IF_ERROR(net->Ip({"-n", ns, "link", "set", "lo", "up"}));
  }
  return net;
}

HostNetwork::~HostNetwork() { TearDown(); }

void HostNetwork::TearDown() {
  for (const std::string& ns : namespaces_) {
    CommandResult pids = RunCommand(ip_, {"netns", "pids", ns});
    for (size_t at = 0; at < pids.out.size();) {
      size_t end = pids.out.find('\n', at);
      if (end == std::string::npos) end = pids.out.size();
      const std::string pid = pids.out.substr(at, end - at);
      if (!pid.empty()) RunCommand("/bin/kill", {"-9", pid});
      at = end + 1;
    }
    RunCommand(ip_, {"netns", "del", ns});
  }
  if (!bridge_.empty()) RunCommand(ip_, {"link", "del", bridge_});
}

std::string HostNetwork::address(int host) const { return "10.213.1." + std::to_string(10 + host); }

Status HostNetwork::SetLinkUp(int host, bool up) {
  return Ip({"link", "set", host_links_[host], up ? "up" : "down"});
}

std::pair<std::string, std::vector<std::string>> HostNetwork::InHost(
    int host, const std::string& binary, std::vector<std::string> args) const {
  args.insert(args.begin(), {"netns", "exec", namespaces_[host], binary});
  return {ip_, std::move(args)};
}

void HostNetwork::RunIn(int host, const std::function<void()>& fn) const {
  const std::string path = "/run/netns/" + namespaces_[host];
  std::thread thread([&] {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
      ADD_FAILURE() << "cannot enter " << path << ": " << std::strerror(errno);
      if (fd >= 0) close(fd);
      return;
    }
    close(fd);
    fn();
  });
  thread.join();
}

Status HostNetwork::Ip(const std::vector<std::string>& args) const {
  CommandResult r = RunCommand(ip_, args);
  if (r.exit_code == 0) return Status();
  std::string command = "ip";
  for (const std::string& a : args) command += " " + a;
  return UnavailableError(command + ": " + r.err);
}

}  // namespace bm::testing
