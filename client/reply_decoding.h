#pragma once

// Decoding of the master's replies into the client's value types, shared by the client's
// source files (client.cc, client_reads.cc, get_or_compute.cc). Internal to the client library.

#include <string>

#include "blockmgr/types.h"
#include "common/core/protocol.h"

namespace bm::reply_decoding {

inline std::string ToStdString(capnp::Text::Reader text) {
  return std::string(text.cStr(), text.size());
}

inline BlockLocation ToBlockLocation(proto::Location::Reader location) {
  return {ToStdString(location.getWorkerId()), ToStdString(location.getAddress()),
          FromProto(location.getTier()), location.getSize()};
}

}  // namespace bm::reply_decoding
