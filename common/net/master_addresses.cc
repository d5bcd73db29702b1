#include "common/net/master_addresses.h"

#include <algorithm>
#include <charconv>
#include <cstdint>

namespace bm {
namespace {

Status ValidateOneConnectable(std::string_view address) {
  auto bad = [&]() {
    return InvalidArgumentError("bad master address '" + std::string(address.substr(0, 100)) +
                                "': expected tcp://HOST:PORT");
  };
  if (address.starts_with("ipc://") || address.starts_with("inproc://")) {
    return address.size() > address.find("://") + 3 ? Status::Ok() : bad();
  }
  if (!address.starts_with("tcp://")) return bad();
  std::string_view rest = address.substr(6);
  size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return bad();
  std::string_view port = rest.substr(colon + 1);
  // A wildcard port is for binding, not connecting.
  uint32_t number = 0;
  auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), number);
  if (port.empty() || error != std::errc() || end != port.data() + port.size() || number == 0 ||
      number > 65535) {
    return bad();
  }
  return Status::Ok();
}

}  // namespace

Status MasterAddresses::ValidateConnectable(std::string_view list) {
  // Several masters (standbys) are separated by commas; each must be an address.
  for (size_t start = 0;;) {
    const size_t comma = list.find(',', start);
    const std::string_view one = list.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    BM_RETURN_IF_ERROR(ValidateOneConnectable(one));
    if (comma == std::string_view::npos) return Status::Ok();
    start = comma + 1;
  }
}

Result<MasterAddresses> MasterAddresses::Parse(std::string_view list) {
  std::vector<std::string> addresses;
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    std::string_view entry =
        list.substr(start, comma == std::string_view::npos ? list.size() - start : comma - start);
    while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
    while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
    if (entry.empty()) {
      return InvalidArgumentError("a master address list has an empty entry: '" +
                                  std::string(list.substr(0, 500)) +
                                  "' (expected tcp://HOST:PORT[,tcp://HOST:PORT...])");
    }
    if (std::find(addresses.begin(), addresses.end(), entry) == addresses.end()) {
      addresses.emplace_back(entry);
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return MasterAddresses(std::move(addresses));
}

bool MasterAddresses::FollowHint(const std::string& leader) {
  if (leader.empty()) return false;
  auto it = std::find(addresses_.begin(), addresses_.end(), leader);
  if (it == addresses_.end()) it = addresses_.insert(addresses_.end(), leader);
  const size_t index = static_cast<size_t>(it - addresses_.begin());
  if (index == current_) return false;
  current_ = index;
  return true;
}

std::string MasterAddresses::ToString() const {
  std::string out;
  for (const std::string& address : addresses_) {
    if (!out.empty()) out += ',';
    out += address;
  }
  return out;
}

}  // namespace bm
