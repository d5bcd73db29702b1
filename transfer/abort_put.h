#pragma once

#include <cstdint>

namespace bm {

class RpcChannel;

// Tells a worker that this client gave up on upload `upload_id` (a piece failed, the source
// failed, or the put fails over to another worker), so the worker releases the space it
// claimed for the block at once instead of when the upload idles out. Best effort: never
// waits for the reply, and a failure to send is ignored (a channel that timed out was reset,
// and the worker drops the uploads of the closed connection on its own).
void PostAbortPut(RpcChannel& channel, uint64_t upload_id);

}  // namespace bm
