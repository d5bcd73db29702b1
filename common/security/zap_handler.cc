#include "common/security/zap_handler.h"

#include <spdlog/spdlog.h>
#include <zmq.h>

#include <array>
#include <vector>

#include "common/security/tenant.h"

namespace bm {
namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
// How often the thread looks at the stop and reload flags when no handshake comes.
constexpr std::chrono::milliseconds kPollInterval{100};
// At most one refusal is logged per interval; the others are counted into the next log line.
constexpr std::chrono::seconds kRefusalLogInterval{1};

std::string ToString(const zmq::message_t& frame) {
  return std::string(static_cast<const char*>(frame.data()), frame.size());
}

}  // namespace

Result<std::unique_ptr<ZapHandler>> ZapHandler::Start(zmq::context_t& context,
                                                      AllowListOptions options) {
  zmq::socket_t socket(context, zmq::socket_type::rep);
  socket.set(zmq::sockopt::linger, 0);
  try {
    socket.bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    return UnavailableError(std::string("cannot bind the ZAP handler: ") + e.what());
  }
  std::unique_ptr<ZapHandler> handler(new ZapHandler(std::move(options), std::move(socket)));
  BM_RETURN_IF_ERROR(handler->Reload());
  handler->thread_ = std::thread([raw = handler.get()] { raw->Run(); });
  return handler;
}

ZapHandler::ZapHandler(AllowListOptions options, zmq::socket_t socket)
    : options_(std::move(options)), socket_(std::move(socket)) {}

ZapHandler::~ZapHandler() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

Status ZapHandler::Reload() {
  std::vector<std::string> problems;
  BM_ASSIGN_OR_RETURN(std::vector<Certificate> certs,
                      LoadCertificateDir(options_.allow_dir, &problems));
  for (const std::string& problem : problems) spdlog::warn("allow-list: skipped {}", problem);
  std::unordered_map<std::string, PeerIdentity> allowed;
  for (const Certificate& cert : certs) {
    Result<KeyRole> role = cert.role();
    if (!role.ok()) {
      spdlog::warn("allow-list: skipped key {}: {}", cert.public_key, role.status().message());
      continue;
    }
    if (*role == KeyRole::kMaster && cert.public_key != options_.master_public_key) continue;
    // A tenant file that does not parse leaves the key out: letting it in as the default
    // tenant would hand it the default tenant's datasets.
    Result<std::string> tenant = ReadTenantFile(cert.path);
    if (!tenant.ok()) {
      spdlog::warn("allow-list: skipped key {}: {}", cert.public_key, tenant.status().message());
      continue;
    }
    allowed[cert.public_key] = PeerIdentity{*role, cert.name(), cert.public_key, *tenant};
  }
  if (!options_.master_public_key.empty()) {
    allowed[options_.master_public_key] =
        PeerIdentity{KeyRole::kMaster, "master", options_.master_public_key};
  }
  allowed_ = std::move(allowed);
  allowed_keys_.store(allowed_.size());
  spdlog::info("allow-list: {} keys from {}", allowed_.size(), options_.allow_dir);
  return Status::Ok();
}

void ZapHandler::Run() {
  while (!stop_.load()) {
    if (reload_requested_.exchange(false)) {
      // A folder that cannot be read keeps the old list rather than locking everyone out.
      if (Status s = Reload(); !s.ok()) spdlog::error("allow-list not reloaded: {}", s.message());
    }
    std::array<zmq::pollitem_t, 1> items{{{socket_.handle(), 0, ZMQ_POLLIN, 0}}};
    try {
      zmq::poll(items.data(), items.size(), kPollInterval);
      if (items[0].revents & ZMQ_POLLIN) Answer();
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      spdlog::error("ZAP handler: {}", e.what());
    }
  }
}

// Request frames (RFC 27): version, request id, domain, address, routing id, mechanism,
// credentials. Reply: version, request id, status code, status text, user id, metadata.
void ZapHandler::Answer() {
  std::vector<zmq::message_t> frames;
  do {
    zmq::message_t frame;
    if (!socket_.recv(frame, zmq::recv_flags::none)) return;
    frames.push_back(std::move(frame));
  } while (socket_.get(zmq::sockopt::rcvmore));
  std::string status = "400";
  std::string text = "unknown key";
  std::string user_id;
  const std::string request_id = frames.size() > 1 ? ToString(frames[1]) : "";
  const std::string address = frames.size() > 3 ? ToString(frames[3]) : "?";
  if (frames.size() < 7 || ToString(frames[0]) != "1.0") {
    text = "malformed ZAP request";
  } else if (ToString(frames[5]) != "CURVE" || frames[6].size() != 32) {
    text = "only CURVE is accepted";
  } else {
    char z85[41] = {};
    zmq_z85_encode(z85, static_cast<const uint8_t*>(frames[6].data()), 32);
    auto found = allowed_.find(z85);
    if (found != allowed_.end() && !AdmitKey(z85)) {
      // Not 300 ("temporary failure"): libzmq then drops the connection without telling the
      // client why. 500 reaches the client's monitor as its own code, which it names.
      status = "500";
      text = "key '" + found->second.name +
             "' holds the most connections one key may have open; try later";
      refused_at_limit_.fetch_add(1);
    } else if (found != allowed_.end()) {
      status = "200";
      text = "OK";
      user_id = EncodeUserId(found->second);
    } else {
      text = std::string("key ") + z85 + " is not allowed";
    }
  }
  if (status == "200") {
    accepted_.fetch_add(1);
  } else {
    refused_.fetch_add(1);
    LogRefusal(address, text);
  }
  const std::array<std::string, 6> reply{"1.0", request_id, status, text, user_id, ""};
  for (size_t i = 0; i < reply.size(); ++i) {
    zmq::send_flags flags = i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    (void)socket_.send(zmq::buffer(reply[i]), flags);
  }
}

void ZapHandler::SetKeyAtLimit(const std::string& public_key, bool at_limit) {
  MutexLock lock(at_limit_mutex_);
  if (at_limit) {
    at_limit_.insert(public_key);
  } else {
    at_limit_.erase(public_key);
  }
}

void ZapHandler::SetHandshakeGate(HandshakeGate* gate) {
  MutexLock lock(at_limit_mutex_);
  gate_ = gate;
}

bool ZapHandler::AdmitKey(const std::string& public_key) {
  MutexLock lock(at_limit_mutex_);
  if (at_limit_.contains(public_key)) return false;
  return gate_ == nullptr || gate_->AdmitHandshake(public_key);
}

void ZapHandler::LogRefusal(const std::string& address, const std::string& why) {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_refusal_log_ < kRefusalLogInterval) {
    ++refusals_not_logged_;
    return;
  }
  if (refusals_not_logged_ > 0) {
    spdlog::warn("refused a connection from {}: {} (and {} more since the last such line)", address,
                 why, refusals_not_logged_);
  } else {
    spdlog::warn("refused a connection from {}: {}", address, why);
  }
  last_refusal_log_ = now;
  refusals_not_logged_ = 0;
}

}  // namespace bm
