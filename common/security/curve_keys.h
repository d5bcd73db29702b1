#pragma once

// CURVE keys in the ZeroMQ certificate format (CZMQ's zcert: ZPL text), so existing ZeroMQ
// tooling reads blockmgr's keys and blockmgr reads theirs:
//
//   NAME.key          metadata (role, name, worker-id) and curve/public-key, shareable
//   NAME.key_secret   the same plus curve/secret-key, mode 0600
//
// Keys are Z85 text (40 characters for 32 bytes), as ZeroMQ's socket options take them.

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "blockmgr/status.h"

namespace bm {

// What a key may do (see docs/security.md "Security"). Stored as the certificate's metadata "role".
enum class KeyRole { kMaster, kWorker, kClient, kAdmin };

const char* KeyRoleName(KeyRole role);
Result<KeyRole> ParseKeyRole(const std::string& text);

// The CURVE keypair of a socket's owner (Z85). Empty: plaintext, as an --insecure cluster runs.
struct CurveKeys {
  std::string public_key;
  std::string secret_key;
  bool enabled() const { return !secret_key.empty(); }
};

// How a connecting socket secures its link: its owner's keys and the one server key it
// trusts. Both empty: plaintext.
struct ChannelSecurity {
  CurveKeys own;
  std::string server_key;
};

// One certificate as read from a file. `secret_key` is empty for a public certificate.
struct Certificate {
  std::string path;        // the file it was read from
  std::string public_key;  // Z85
  std::string secret_key;  // Z85; empty unless read from a _secret file
  std::map<std::string, std::string> metadata;

  // The role in the metadata; kInvalidArgument when missing or unknown.
  Result<KeyRole> role() const;
  // The certificate's name (metadata "name"; for workers, "worker-id" wins).
  std::string name() const;
};

// True when libzmq was built with CURVE (libsodium).
bool CurveAvailable();

// Writes DIR/NAME.key and DIR/NAME.key_secret (0600) for a new keypair. For a worker, NAME is
// also the worker id the key may register as. Refuses to overwrite existing files.
Status GenerateCertificate(const std::string& dir, const std::string& name, KeyRole role);

// Reads a certificate file (public or secret). A secret certificate readable by group or
// others is refused, as ssh refuses such private keys.
Result<Certificate> LoadCertificate(const std::string& path);

// A node's keypair from its secret certificate (NAME.key_secret); kInvalidArgument when the
// file holds no secret key.
Result<CurveKeys> LoadKeyPair(const std::string& secret_path);

// Reads every "*.key" certificate in `dir` (secret files are skipped). A file that does not
// parse is reported in `problems` and left out, so one bad file does not lock everyone out.
Result<std::vector<Certificate>> LoadCertificateDir(const std::string& dir,
                                                    std::vector<std::string>* problems);

// Who sent a message, as the server's ZAP handler authenticated it. It travels from the ZAP
// handler to the server as the connection's ZAP user id, "ROLE NAME PUBLIC-KEY" (Z85 has no
// spaces), or "ROLE:TENANT NAME PUBLIC-KEY" for a key the allow-list gives a tenant
// (common/security/tenant.h), which libzmq attaches to every message received on that connection.
struct PeerIdentity {
  KeyRole role = KeyRole::kClient;
  std::string name;
  std::string public_key;
  std::string tenant{};  // empty: the key names none (the default tenant)
};
std::string EncodeUserId(const PeerIdentity& peer);
// nullopt for an empty or foreign user id.
std::optional<PeerIdentity> DecodeUserId(std::string_view user_id);

// True when `text` is a 40-character Z85 CURVE key.
bool IsZ85Key(const std::string& text);

}  // namespace bm
