#include "common/security/node_security.h"

namespace bm {

bool IsLoopbackEndpoint(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0) return true;
  if (endpoint.rfind("tcp://", 0) != 0) return false;
  const std::string rest = endpoint.substr(6);
  const size_t colon = rest.rfind(':');
  const std::string host = colon == std::string::npos ? rest : rest.substr(0, colon);
  return host == "localhost" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

Status CheckListenSecurity(const std::string& listen, bool has_key, bool insecure) {
  if (has_key && insecure) {
    return InvalidArgumentError("--insecure and --key exclude each other");
  }
  if (has_key || insecure || IsLoopbackEndpoint(listen)) return Status::Ok();
  return InvalidArgumentError(
      "refusing to listen on " + listen +
      " without keys: anyone who can reach it could join, read or delete blocks. Give --key "
      "and --allow (see docs/security.md; `bmctl keygen` makes keys), or --insecure on a "
      "trusted network");
}

Result<SecureNode> StartSecureNode(zmq::context_t& context, const std::string& key_file,
                                   KeyRole role, const std::string& allow_dir,
                                   const std::string& master_public_key) {
  if (!CurveAvailable()) {
    return InternalError("this libzmq was built without CURVE (libsodium): --key cannot work");
  }
  if (allow_dir.empty()) {
    return InvalidArgumentError("--key needs --allow DIR: the folder of public keys let in");
  }
  BM_ASSIGN_OR_RETURN(Certificate cert, LoadCertificate(key_file));
  if (cert.secret_key.empty()) {
    return InvalidArgumentError(key_file + " holds no secret key; give the NAME.key_secret file");
  }
  BM_ASSIGN_OR_RETURN(KeyRole found, cert.role());
  if (found != role) {
    return InvalidArgumentError(key_file + " is a " + KeyRoleName(found) + " key; this needs a " +
                                KeyRoleName(role) + " key");
  }
  SecureNode node;
  node.keys = CurveKeys{cert.public_key, cert.secret_key};
  // Standby masters share the master's key pair (workers and clients vouch for one master
  // key), and a standby follows the leader's journal as a client of it: a master lets in its
  // own key, as the master role, whatever the allow folder holds.
  const std::string trusted_master =
      role == KeyRole::kMaster && master_public_key.empty() ? cert.public_key : master_public_key;
  BM_ASSIGN_OR_RETURN(node.zap,
                      ZapHandler::Start(context, AllowListOptions{allow_dir, trusted_master}));
  return node;
}

}  // namespace bm
