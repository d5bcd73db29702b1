#include "common/core/loop_queries.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace bm {

Result<WakeFd> WakeFd::Create() {
  const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) return InternalError(std::string("eventfd: ") + std::strerror(errno));
  return WakeFd(fd);
}

WakeFd::~WakeFd() {
  if (fd_ >= 0) close(fd_);
}

void WakeFd::Wake() const {
  const uint64_t one = 1;
  // Fails only when the counter is saturated, i.e. the loop is already woken.
  (void)!write(fd_, &one, sizeof(one));
}

void WakeFd::Clear() const {
  uint64_t count = 0;
  (void)!read(fd_, &count, sizeof(count));
}

}  // namespace bm
