#include "transfer/block_copier.h"

namespace bm {

BlockCopier::BlockCopier(WorkerChannels& channels)
    : channels_(channels), upload_ids_(std::random_device{}()) {}

Result<uint32_t> BlockCopier::CopyToWorkers(const BlockId& id, PieceSource& source,
                                            const std::vector<WorkerInfo>& targets,
                                            StorageLevel level, uint64_t version) {
  for (const WorkerInfo& target : targets) channels_.Trust(target.address, target.public_key);
  std::vector<const WorkerInfo*> pointers;
  for (const WorkerInfo& target : targets) pointers.push_back(&target);
  BlockUpload upload(channels_, id, level, UploadVersion{version, /*replica=*/true}, source);
  uint32_t copies = 0;
  Status last;
  for (Result<PutResult>& put : upload.Run(pointers, upload_ids_)) {
    if (put.ok()) {
      ++copies;
    } else {
      last = put.status();
    }
  }
  if (copies == 0 && !targets.empty()) return last;
  return copies;
}

}  // namespace bm
