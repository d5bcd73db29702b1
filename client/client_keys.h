#pragma once

#include <string>

#include "blockmgr/client.h"
#include "blockmgr/status.h"
#include "common/security/curve_keys.h"

namespace bm {

// A client's CURVE keys: its own keypair and the master's public key (all empty: plaintext).
struct ClientKeys {
  CurveKeys own;
  std::string master_key;
};

// The keys ClientOptions names (key_file and master_key_file, both or neither); kInvalidArgument
// when only one is given, or the error reading either file.
Result<ClientKeys> LoadClientKeys(const ClientOptions& options);

// The client's own keypair, or why there is none (for its WorkerChannels).
Result<CurveKeys> OwnKeys(const Result<ClientKeys>& keys);
// The security of the channel to the master, or why there is none (for its MasterClient).
Result<ChannelSecurity> MasterSecurity(const Result<ClientKeys>& keys);

}  // namespace bm
