#include "common/net/host_identity.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

namespace bm {

std::string HostIdentity() {
  if (const char* given = std::getenv("BLOCKMGR_HOST_ID"); given != nullptr && *given != '\0') {
    return given;
  }
  std::string boot_id;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::getline(boot, boot_id);
  struct stat net {};
  const std::string netns =
      stat("/proc/self/ns/net", &net) == 0 ? std::to_string(net.st_ino) : "unknown";
  return boot_id + "/net:" + netns;
}

}  // namespace bm
