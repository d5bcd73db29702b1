#include "common/security/curve_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace bm {
namespace {

constexpr size_t kZ85KeyChars = 40;
constexpr size_t kMaxCertificateBytes = 64 * 1024;

std::string Trim(std::string_view text) {
  size_t begin = 0;
  size_t end = text.size();
  while (begin < end && (text[begin] == ' ' || text[begin] == '\t')) ++begin;
  while (end > begin && (text[end - 1] == ' ' || text[end - 1] == '\t' || text[end - 1] == '\r')) {
    --end;
  }
  return std::string(text.substr(begin, end - begin));
}

std::string Unquote(const std::string& value) {
  if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
      value.back() == value.front()) {
    return value.substr(1, value.size() - 2);
  }
  return value;
}

// Parses the two levels of ZPL that certificates use: "section" lines at column 0 and
// indented "name = value" lines under them. Keys come back as "section/name".
Result<std::map<std::string, std::string>> ParseZpl(const std::string& text,
                                                    const std::string& path) {
  std::map<std::string, std::string> values;
  std::string section;
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    const std::string trimmed = Trim(line);
    if (trimmed.empty() || trimmed.front() == '#') continue;
    const bool indented = line.front() == ' ' || line.front() == '\t';
    const size_t equals = trimmed.find('=');
    if (!indented) {
      if (equals != std::string::npos) {
        return InvalidArgumentError(path + ":" + std::to_string(number) +
                                    ": a top-level line must name a section");
      }
      section = trimmed;
      continue;
    }
    if (equals == std::string::npos || section.empty()) {
      return InvalidArgumentError(path + ":" + std::to_string(number) +
                                  ": expected 'name = \"value\"' inside a section");
    }
    values[section + "/" + Trim(trimmed.substr(0, equals))] =
        Unquote(Trim(trimmed.substr(equals + 1)));
  }
  return values;
}

std::string CertificateText(const std::string& name, KeyRole role, const char* public_key,
                            const char* secret_key) {
  std::time_t now = std::time(nullptr);
  char when[32] = {};
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", std::gmtime(&now));
  std::ostringstream out;
  out << "#   ****  Generated on " << when << " UTC by bmctl keygen  ****\n";
  if (secret_key) {
    out << "#   ZeroMQ CURVE **Secret** Certificate\n"
        << "#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.\n";
  } else {
    out << "#   ZeroMQ CURVE Public Certificate\n"
        << "#   Exchange securely, or use a secure mechanism to verify the contents\n"
        << "#   of this file after exchange.\n";
  }
  out << "\nmetadata\n"
      << "    name = \"" << name << "\"\n"
      << "    role = \"" << KeyRoleName(role) << "\"\n";
  if (role == KeyRole::kWorker) out << "    worker-id = \"" << name << "\"\n";
  out << "curve\n"
      << "    public-key = \"" << public_key << "\"\n";
  if (secret_key) out << "    secret-key = \"" << secret_key << "\"\n";
  return out.str();
}

Status WriteNewFile(const std::string& path, const std::string& text, mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    return InvalidArgumentError("cannot create " + path + ": " + std::strerror(errno));
  }
  // The mode given to open() is masked by the umask; the secret file must end up 0600.
  (void)::fchmod(fd, mode);
  size_t written = 0;
  while (written < text.size()) {
    ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return InternalError("cannot write " + path + ": " + std::strerror(errno));
    }
    written += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) return InternalError("cannot write " + path + ": " + std::strerror(errno));
  return Status::Ok();
}

bool IsValidName(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return false;
    }
  }
  return name.front() != '.';
}

}  // namespace

const char* KeyRoleName(KeyRole role) {
  switch (role) {
    case KeyRole::kMaster:
      return "master";
    case KeyRole::kWorker:
      return "worker";
    case KeyRole::kClient:
      return "client";
    case KeyRole::kAdmin:
      return "admin";
  }
  return "unknown";
}

Result<KeyRole> ParseKeyRole(const std::string& text) {
  if (text == "master") return KeyRole::kMaster;
  if (text == "worker") return KeyRole::kWorker;
  if (text == "client") return KeyRole::kClient;
  if (text == "admin") return KeyRole::kAdmin;
  return InvalidArgumentError("unknown role '" + text + "' (master, worker, client or admin)");
}

Result<KeyRole> Certificate::role() const {
  auto found = metadata.find("role");
  if (found == metadata.end()) return InvalidArgumentError("certificate names no role");
  return ParseKeyRole(found->second);
}

std::string Certificate::name() const {
  if (auto id = metadata.find("worker-id"); id != metadata.end()) return id->second;
  if (auto name = metadata.find("name"); name != metadata.end()) return name->second;
  return "";
}

std::string EncodeUserId(const PeerIdentity& peer) {
  std::string role = KeyRoleName(peer.role);
  if (!peer.tenant.empty()) role += ":" + peer.tenant;
  return role + " " + peer.name + " " + peer.public_key;
}

std::optional<PeerIdentity> DecodeUserId(std::string_view user_id) {
  const size_t first = user_id.find(' ');
  const size_t last = user_id.rfind(' ');
  if (first == std::string_view::npos || first == last) return std::nullopt;
  std::string_view role_part = user_id.substr(0, first);
  std::string tenant;
  if (const size_t colon = role_part.find(':'); colon != std::string_view::npos) {
    tenant = std::string(role_part.substr(colon + 1));
    role_part = role_part.substr(0, colon);
    if (tenant.empty()) return std::nullopt;
  }
  Result<KeyRole> role = ParseKeyRole(std::string(role_part));
  if (!role.ok()) return std::nullopt;
  return PeerIdentity{*role, std::string(user_id.substr(first + 1, last - first - 1)),
                      std::string(user_id.substr(last + 1)), std::move(tenant)};
}

bool CurveAvailable() { return zmq_has("curve") != 0; }

bool IsZ85Key(const std::string& text) {
  if (text.size() != kZ85KeyChars) return false;
  uint8_t decoded[32];
  return zmq_z85_decode(decoded, text.c_str()) != nullptr;
}

Status GenerateCertificate(const std::string& dir, const std::string& name, KeyRole role) {
  if (!IsValidName(name)) {
    return InvalidArgumentError("key name '" + name +
                                "' must be 1-128 letters, digits, '-', '_' or '.'");
  }
  if (!CurveAvailable()) {
    return InternalError("this libzmq was built without CURVE (libsodium): no keys possible");
  }
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return InvalidArgumentError("cannot create " + dir + ": " + error.message());
  char public_key[41] = {};
  char secret_key[41] = {};
  if (zmq_curve_keypair(public_key, secret_key) != 0) {
    return InternalError(std::string("cannot make a keypair: ") + zmq_strerror(zmq_errno()));
  }
  const std::string base = (std::filesystem::path(dir) / name).string();
  if (std::filesystem::exists(base + ".key") || std::filesystem::exists(base + ".key_secret")) {
    return InvalidArgumentError(base + ".key or .key_secret exists already; not overwriting");
  }
  BM_RETURN_IF_ERROR(WriteNewFile(base + ".key_secret",
                                  CertificateText(name, role, public_key, secret_key), 0600));
  Status public_written =
      WriteNewFile(base + ".key", CertificateText(name, role, public_key, nullptr), 0644);
  std::memset(secret_key, 0, sizeof(secret_key));
  return public_written;
}

Result<Certificate> LoadCertificate(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    return NotFoundError("cannot read key " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(info.st_mode) || info.st_size > static_cast<off_t>(kMaxCertificateBytes)) {
    return InvalidArgumentError(path + " is not a certificate file");
  }
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot read key " + path);
  std::stringstream text;
  text << in.rdbuf();
  BM_ASSIGN_OR_RETURN(auto values, ParseZpl(text.str(), path));
  Certificate cert;
  for (const auto& [key, value] : values) {
    if (key.rfind("metadata/", 0) == 0) cert.metadata[key.substr(9)] = value;
  }
  cert.public_key = values["curve/public-key"];
  cert.secret_key = values["curve/secret-key"];
  if (!IsZ85Key(cert.public_key)) {
    return InvalidArgumentError(path + ": curve/public-key is missing or not a Z85 key");
  }
  if (!cert.secret_key.empty()) {
    if (!IsZ85Key(cert.secret_key)) {
      return InvalidArgumentError(path + ": curve/secret-key is not a Z85 key");
    }
    if ((info.st_mode & 077) != 0) {
      return InvalidArgumentError(path + " holds a secret key but is readable by others; " +
                                  "chmod 600 it");
    }
    char derived[41] = {};
    if (zmq_curve_public(derived, cert.secret_key.c_str()) != 0 || cert.public_key != derived) {
      return InvalidArgumentError(path + ": the public key does not belong to the secret key");
    }
  }
  return cert;
}

Result<CurveKeys> LoadKeyPair(const std::string& secret_path) {
  BM_ASSIGN_OR_RETURN(Certificate cert, LoadCertificate(secret_path));
  if (cert.secret_key.empty()) {
    return InvalidArgumentError(secret_path +
                                " holds no secret key; give the NAME.key_secret file");
  }
  return CurveKeys{cert.public_key, cert.secret_key};
}

Result<std::vector<Certificate>> LoadCertificateDir(const std::string& dir,
                                                    std::vector<std::string>* problems) {
  std::error_code error;
  std::filesystem::directory_iterator entries(dir, error);
  if (error) return NotFoundError("cannot read allow-list folder " + dir + ": " + error.message());
  std::vector<Certificate> certs;
  for (const auto& entry : entries) {
    if (entry.path().extension() != ".key") continue;
    Result<Certificate> cert = LoadCertificate(entry.path().string());
    if (!cert.ok()) {
      if (problems) problems->push_back(cert.status().message());
      continue;
    }
    cert->secret_key.clear();  // an allow-list needs public keys only
    cert->path = entry.path().string();
    certs.push_back(std::move(cert).value());
  }
  return certs;
}

}  // namespace bm
