#pragma once

// The shuffle requests of the master's protocol (PROTOCOL.md, "Shuffles") read into and
// written from ShuffleService's terms, so the loop only routes them: decode, ask the service,
// carry out its effects, encode the answer.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "blockmgr/status.h"
#include "common/core/clock.h"
#include "common/core/protocol.h"
#include "master/shuffle_service.h"
#include "master/worker_links.h"
#include "master/worker_registry.h"

namespace bm {

// What answering a shuffle request needs besides the service.
struct ShuffleRequestContext {
  const WorkerRegistry& registry;  // workers' addresses and free space
  const WorkerLinks& links;        // workers' keys
  std::string tenant;              // the sender's tenant; empty when not restricted
  // Which shuffles' datasets (shuffle_<id>) a listing shows; null: all.
  std::function<bool(const std::string& dataset)> visible;
  TimePoint now{};
};

// Answers registerShuffle, getShuffle, commitShuffleMap, unregisterShuffle or listShuffles in
// `reply`, adding to `effects` what the loop must journal and send.
Status AnswerShuffleRequest(ShuffleService& shuffles, proto::Request::Reader request,
                            const ShuffleRequestContext& context, proto::Reply::Builder reply,
                            ShuffleEffects& effects);

// Whether the master's dispatcher routes `which` to AnswerShuffleRequest.
bool IsShuffleRequest(proto::Request::Which which);

// A placement's splits as the wire and the journal carry them.
void EncodeSplits(const std::vector<ShuffleSplitPlacement>& splits,
                  capnp::List<proto::ShuffleSplit>::Builder out);

// The live workers partitions may be placed on: active ones (not unconfirmed or draining),
// with their free memory and disk.
std::vector<ShuffleCandidate> ShuffleCandidates(const WorkerRegistry& registry);

// shuffleAssigned or removeShuffle, to the command's worker; the replicas it forwards to are
// named with the addresses and keys `registry` and `links` hold.
Status SendShuffleCommand(WorkerLinks& links, const WorkerRegistry& registry,
                          const ShuffleCommand& command);

}  // namespace bm
