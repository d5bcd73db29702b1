#include "tests/support/request_kinds.h"

#include <capnp/dynamic.h>

#include <optional>

namespace bm::testing {
namespace {

std::optional<capnp::StructSchema> StructOf(const RequestKind& kind) {
  capnp::Type type = kind.field.getType();
  if (!type.isStruct()) return std::nullopt;
  return type.asStruct();
}

}  // namespace

std::vector<RequestKind> AllRequestKinds() {
  std::vector<RequestKind> kinds;
  for (capnp::StructSchema::Field field : capnp::Schema::from<proto::Request>().getUnionFields()) {
    kinds.push_back({static_cast<proto::Request::Which>(field.getProto().getDiscriminantValue()),
                     std::string(field.getProto().getName().cStr()), field});
  }
  return kinds;
}

bool NamesABlockOrAnRdd(const RequestKind& kind) {
  std::optional<capnp::StructSchema> type = StructOf(kind);
  if (!type) return false;
  for (const char* name : {"blockId", "blockIds", "rddId", "shuffleId"}) {
    if (type->findFieldByName(name) != nullptr) return true;
  }
  return false;
}

BlockId SampleBlockFor(const RequestKind& kind) {
  std::optional<capnp::StructSchema> type = StructOf(kind);
  if (type && type->findFieldByName("shuffleId") != nullptr) return BlockId::Shuffle(100, 0, 0);
  return BlockId::Rdd(100, 0);
}

proto::Request::Builder BuildRequestNaming(capnp::MessageBuilder& message, const RequestKind& kind,
                                           const BlockId& block) {
  capnp::DynamicStruct::Builder root =
      message.initRoot<capnp::DynamicStruct>(capnp::Schema::from<proto::Request>());
  root.set("id", 1);
  if (std::optional<capnp::StructSchema> type = StructOf(kind)) {
    capnp::DynamicStruct::Builder body = root.init(kind.field).as<capnp::DynamicStruct>();
    const std::string id = block.ToString();
    if (type->findFieldByName("blockId") != nullptr) body.set("blockId", id.c_str());
    if (type->findFieldByName("blockIds") != nullptr) {
      body.init("blockIds", 1).as<capnp::DynamicList>().set(0, id.c_str());
    }
    if (type->findFieldByName("rddId") != nullptr && block.is_rdd()) {
      body.set("rddId", *block.rdd_id());
    }
    if (type->findFieldByName("shuffleId") != nullptr && block.shuffle_id()) {
      body.set("shuffleId", *block.shuffle_id());
    }
  } else if (kind.field.getType().isText()) {
    root.set(kind.field, "");
  } else {
    root.set(kind.field, capnp::VOID);
  }
  return message.getRoot<proto::Request>();
}

}  // namespace bm::testing
