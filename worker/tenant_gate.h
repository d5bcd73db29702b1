#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "blockmgr/status.h"
#include "common/core/clock.h"
#include "common/net/transport.h"
#include "common/security/tenant.h"
#include "worker/guaranteed_shares.h"
#include "worker/master_link.h"

namespace bm {

// The worker's half of the tenant rules (common/security/tenant.h; PROTOCOL.md "Tenants"): the
// bytes are here, so a client key's get, put and contains are checked here too, not only at the
// master. Only the master knows who owns a dataset and with whom it is shared:
//
//   - A read of a dataset this worker holds no record of is parked while the worker asks the
//     master (checkAccess), then served again. An owned dataset's record is kept until the
//     master sends a newer one (datasetAccess, on every share and unshare) or the worker
//     registers again (it may have missed some while away). A dataset nobody owns is
//     remembered for kFreeRecordLifetime only, as a put on another worker may claim it.
//   - Every put's first piece asks the master, with a claim (the first tenant to put into a
//     free dataset owns it; two tenants racing on two workers are decided by the master's one
//     loop) and the put's bytes (admitted against the owner's quota: the reservation travels
//     with the block's report), for all of the put's copies at its first copy, so a put the
//     quota refuses stores none. The upload's later pieces wait behind it.
//
// Parked requests are taken into the gate and handed back, in arrival order, by TakeResumed.
// Not thread-safe: owned by the worker's loop. Borrows the link and the clock.
class TenantGate {
 public:
  static constexpr Duration kFreeRecordLifetime = std::chrono::seconds(1);

  // Tells `shares` every dataset owner it hears of (borrowed, as are the link and the clock).
  TenantGate(MasterLink& link, GuaranteedShares& shares, const Clock& clock)
      : link_(link), shares_(shares), clock_(clock) {}
  TenantGate(const TenantGate&) = delete;
  TenantGate& operator=(const TenantGate&) = delete;

  // What became of a request checked here.
  struct Admission {
    bool parked = false;       // taken: it comes back from TakeResumed
    uint64_t reservation = 0;  // a put's first piece: its quota reservation
  };

  // A read (get, getBlocks, contains) of blocks of `datasets` by a restricted `peer`:
  // kPermissionDenied when its tenant may not read one of them.
  Result<Admission> AdmitRead(const PeerIdentity& peer, const std::vector<std::string>& datasets,
                              IncomingMessage& message);
  // A put piece by a restricted `peer`. `upload` names the upload (sender and upload id).
  struct PutInfo {
    std::string upload;
    BlockId block;
    uint64_t offset = 0;
    uint64_t total_size = 0;
    StorageLevel level = StorageLevel::kMemoryOnly;
    uint64_t version = 0;  // the put's version token, shared by its copies
    uint32_t copies = 0;   // how many copies the put stores (0: one)
  };
  Result<Admission> AdmitPut(const PeerIdentity& peer, const PutInfo& put,
                             IncomingMessage& message);
  // From the records held only, never parking (same-host reads, which fall back to TCP when
  // the answer is kAborted: nothing known yet).
  Status CheckKnown(const PeerIdentity& peer, const std::string& dataset, DatasetOp op) const;

  // The tenant owning `dataset`, from the records held only; nullopt when none is known.
  std::optional<std::string> OwnerOf(const std::string& dataset) const;

  // The master's datasetAccess: a newer record replaces the one held.
  void Update(const std::string& dataset, const DatasetAccess& access);
  // Drops every record (the worker registered again).
  void ForgetAll() { records_.clear(); }

  // Takes the link's answers; returns the parked requests to serve again, in arrival order,
  // each with the failure to answer it with instead (Ok: serve it).
  struct Resumed {
    IncomingMessage message;
    Status failed;
  };
  std::vector<Resumed> TakeResumed();

  size_t parked() const { return parked_count_; }

 private:
  struct Record {
    DatasetAccess access;
    std::optional<TimePoint> expires;  // a free dataset's record lapses
  };
  // A question in flight and the requests waiting for its answer.
  struct Ask {
    std::string dataset;
    std::string tenant;
    std::string upload;  // a put's; empty for a read
    std::deque<IncomingMessage> waiting;
  };
  struct PutAnswer {
    Result<uint64_t> reservation;
  };

  const Record* Find(const std::string& dataset) const;
  void Remember(const std::string& dataset, const DatasetAccess& access);
  // Sends a question and parks `message` under it; or fails as the link does.
  Result<Admission> AskAndPark(const MasterLink::AccessQuestion& question,
                               const std::string& upload, IncomingMessage& message);
  Admission Park(uint64_t ask, IncomingMessage& message);

  MasterLink& link_;
  GuaranteedShares& shares_;
  const Clock& clock_;
  std::map<std::string, Record> records_;            // by dataset
  std::map<uint64_t, Ask> asks_;                     // by ask number
  std::map<std::string, uint64_t> dataset_asks_;     // a read's question per dataset
  std::map<std::string, uint64_t> upload_asks_;      // a put's question per upload
  std::map<std::string, PutAnswer> upload_answers_;  // answered, first piece not served again
  uint64_t next_ask_ = 1;
  size_t parked_count_ = 0;
};

}  // namespace bm
