#pragma once

// The transport's ceiling: block-sized transfers over bare ZeroMQ, with none of blockmgr's
// protocol, lookups or stores. The server runs in its own process (`bm-bench --serve-zmq`).
//
// Wire format: every message is one frame, so bytes stream without ZeroMQ holding a whole
// multipart message back until its last frame arrived. A request is an op frame, one byte ('G'
// send me N bytes, 'P' I send you N bytes) and a little-endian uint64 N. 'G' is answered with N
// bytes as messages of 1 MiB sent zero-copy from a buffer filled at start-up. After 'P' the
// client sends N bytes as 1 MiB messages; the server answers with an op frame once all arrived.

#include <cstdint>
#include <string>

#include "blockmgr/status.h"

namespace bm::bench {

// Serves the protocol above on a ROUTER bound to `endpoint` until killed. 'G' requests may ask
// for at most `max_bytes`.
Status RunRawZmqServer(const std::string& endpoint, uint64_t max_bytes);

}  // namespace bm::bench
