#pragma once

// The kinds of schema/messages.capnp's Request union, found by schema reflection, so a test
// that walks them covers a kind added later without being told of it.

#include <capnp/message.h>
#include <capnp/schema.h>

#include <string>
#include <vector>

#include "blockmgr/block_id.h"
#include "schema/messages.capnp.h"

namespace bm::testing {

struct RequestKind {
  proto::Request::Which which;
  std::string name;  // as in the schema
  capnp::StructSchema::Field field;
};

// Every member of the Request union, in the schema's order.
std::vector<RequestKind> AllRequestKinds();

// Whether a request of `kind` names a block (a blockId or blockIds field), an RDD (rddId) or a
// shuffle (shuffleId): a dataset.
bool NamesABlockOrAnRdd(const RequestKind& kind);

// A block a request of `kind` can name: a shuffle's for a kind with a shuffleId (whose dataset
// is shuffle_<id>), else an RDD's.
BlockId SampleBlockFor(const RequestKind& kind);

// A request of `kind` (id 1) in `message`, every block it names set to `block`, every RDD id
// to `block`'s RDD and every shuffle id to `block`'s shuffle; the rest left at their defaults.
proto::Request::Builder BuildRequestNaming(capnp::MessageBuilder& message, const RequestKind& kind,
                                           const BlockId& block);

}  // namespace bm::testing
