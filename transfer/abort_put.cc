#include "transfer/abort_put.h"

#include <capnp/message.h>

#include "common/net/transport.h"
#include "schema/messages.capnp.h"

namespace bm {

void PostAbortPut(RpcChannel& channel, uint64_t upload_id) {
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Request>().initAbortPut().setUploadId(upload_id);
  Status posted = channel.Post(message);
  (void)posted;  // best effort, see the header
}

}  // namespace bm
