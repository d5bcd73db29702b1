#include "common/master_addresses.h"

#include <algorithm>

namespace bm {

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
