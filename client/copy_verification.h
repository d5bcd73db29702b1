#pragma once

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"
#include "blockmgr/types.h"

namespace bm {

class WorkerChannels;

// Asks the worker at `location` to re-read its copy of `id` now and check it against the
// block's digests (PROTOCOL.md, verifyBlock); `reported_bad` says a reader found it corrupt. A
// worker that cannot be reached is a kUnreachable check, not an error. Runs on the thread that
// owns `workers`.
Result<CopyCheck> VerifyWorkerCopy(WorkerChannels& workers, const BlockLocation& location,
                                   const BlockId& id, bool reported_bad);

}  // namespace bm
