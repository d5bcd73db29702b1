#pragma once

// The transport's ceiling: block-sized transfers over bare ZeroMQ, with none of blockmgr's
// protocol, lookups or stores. The server runs in its own process (`bm-bench --serve-zmq`).
//
// Wire format: a request is [op frame][payload frames...]. The op frame is one byte ('G' send
// me N bytes, 'P' here are bytes) and a little-endian uint64 N. 'G' is answered with a header
// frame and N bytes as 1 MiB frames sent zero-copy from a buffer filled at start-up; 'P' (whose
// payload follows the op frame) with a header frame alone.

#include <cstdint>
#include <string>

#include "common/status.h"

namespace bm::bench {

// Serves the protocol above on a ROUTER bound to `endpoint` until killed. 'G' requests may ask
// for at most `max_bytes`.
Status RunRawZmqServer(const std::string& endpoint, uint64_t max_bytes);

}  // namespace bm::bench
