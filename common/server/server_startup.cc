#include "common/server/server_startup.h"

#include <cstdio>

namespace bm {

int StartFailed(std::string_view program, const Status& why, int exit_code) {
  std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(program.size()), program.data(),
               why.message().c_str());
  return exit_code;
}

int StartFailed(std::string_view program, const Status& why) {
  return StartFailed(program, why,
                     why.code() == StatusCode::kInvalidArgument ? kUsageExit : kStartExit);
}

Result<SecureNode> StartServerKeys(zmq::context_t& context, const std::string& key_file,
                                   KeyRole role, const std::string& allow_dir,
                                   const std::string& master_key_file, ShutdownSignals& signals) {
  if (key_file.empty()) return SecureNode{};
  std::string master_public_key;
  if (!master_key_file.empty()) {
    BM_ASSIGN_OR_RETURN(Certificate master_cert, LoadCertificate(master_key_file));
    master_public_key = master_cert.public_key;
  }
  BM_ASSIGN_OR_RETURN(SecureNode secure,
                      StartSecureNode(context, key_file, role, allow_dir, master_public_key));
  signals.CallOnReload([zap = secure.zap.get()] { zap->RequestReload(); });
  return secure;
}

}  // namespace bm
