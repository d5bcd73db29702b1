#include "bmctl/command.h"

#include <iostream>

#include "common/security/tenant.h"

namespace bm {

int BmctlCommand::RunLocally() {
  BM_CHECK(false && "RunLocally is only for commands that need no master");
  return kExitFailure;
}

int Fail(const Status& status) {
  std::cerr << "bmctl: " << status.ToString() << "\n";
  return IsQuotaExceeded(status) ? kExitQuotaExceeded : kExitFailure;
}

int FlushStdout() {
  std::cout.flush();
  if (!std::cout) return Fail(InternalError("writing to stdout failed"));
  return kExitSuccess;
}

}  // namespace bm
