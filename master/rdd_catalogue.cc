#include "master/rdd_catalogue.h"

#include <string>
#include <utility>

namespace bm {

Result<std::optional<JournaledRdd>> RddCatalogue::Register(proto::RegisterRdd::Reader request) {
  capnp::Text::Reader name = request.getName();
  if (name.size() > kMaxNameBytes) {
    return InvalidArgumentError("RDD name is longer than " + std::to_string(kMaxNameBytes) +
                                " bytes");
  }
  const uint64_t rdd_id = request.getRddId();
  if (!descriptions_.contains(rdd_id) && descriptions_.size() >= kMaxRdds) {
    return OutOfSpaceError("the master already describes " + std::to_string(kMaxRdds) +
                           " RDDs; remove some first");
  }
  RddDescription description{std::string(name.cStr(), name.size()), FromProto(request.getLevel()),
                             request.getTotalPartitions()};
  if (auto known = descriptions_.find(rdd_id); known != descriptions_.end()) {
    const RddDescription& old = known->second;
    if (old.name != description.name || old.level != description.level ||
        old.total_partitions != description.total_partitions) {
      return InvalidArgumentError("RDD " + std::to_string(rdd_id) + " is already persisted as '" +
                                  old.name + "' (" + std::to_string(old.total_partitions) +
                                  " partitions, " + std::string(StorageLevelName(old.level)) +
                                  "); remove it first (bmctl rm-rdd " + std::to_string(rdd_id) +
                                  ") to persist it as '" + description.name + "' (" +
                                  std::to_string(description.total_partitions) + " partitions, " +
                                  std::string(StorageLevelName(description.level)) + ")");
    }
    return std::optional<JournaledRdd>();
  }
  JournaledRdd record{.rdd_id = rdd_id,
                      .name = description.name,
                      .level = description.level,
                      .total_partitions = description.total_partitions};
  descriptions_.insert_or_assign(rdd_id, std::move(description));
  return std::optional<JournaledRdd>(std::move(record));
}

void RddCatalogue::Restore(std::vector<JournaledRdd> rdds) {
  for (JournaledRdd& rdd : rdds) {
    descriptions_.insert_or_assign(
        rdd.rdd_id, RddDescription{std::move(rdd.name), rdd.level, rdd.total_partitions});
  }
}

}  // namespace bm
