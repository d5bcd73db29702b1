#include "client/client_keys.h"

#include <utility>

namespace bm {

Result<ClientKeys> LoadClientKeys(const ClientOptions& options) {
  if (options.key_file.empty() != options.master_key_file.empty()) {
    return InvalidArgumentError(
        "keys need both a key (--key, BLOCKMGR_KEY) and the master's key (--master-key, "
        "BLOCKMGR_MASTER_KEY)");
  }
  if (options.key_file.empty()) return ClientKeys{};
  BM_ASSIGN_OR_RETURN(CurveKeys own, LoadKeyPair(options.key_file));
  BM_ASSIGN_OR_RETURN(Certificate master, LoadCertificate(options.master_key_file));
  return ClientKeys{std::move(own), master.public_key};
}

Result<CurveKeys> OwnKeys(const Result<ClientKeys>& keys) {
  if (!keys.ok()) return keys.status();
  return keys->own;
}

Result<ChannelSecurity> MasterSecurity(const Result<ClientKeys>& keys) {
  if (!keys.ok()) return keys.status();
  return ChannelSecurity{keys->own, keys->master_key};
}

}  // namespace bm
