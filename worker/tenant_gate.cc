#include "worker/tenant_gate.h"

#include <spdlog/spdlog.h>

namespace bm {

const TenantGate::Record* TenantGate::Find(const std::string& dataset) const {
  auto found = records_.find(dataset);
  if (found == records_.end()) return nullptr;
  if (found->second.expires && *found->second.expires <= clock_.Now()) return nullptr;
  return &found->second;
}

void TenantGate::Remember(const std::string& dataset, const DatasetAccess& access) {
  auto found = records_.find(dataset);
  if (found != records_.end() && found->second.access.owned() &&
      found->second.access.generation > access.generation) {
    return;  // an older answer than a datasetAccess update already heard: quota included
  }
  shares_.Learn(dataset, access.owner, access.owner_memory_quota);
  Record record{access, std::nullopt};
  if (!access.owned()) record.expires = clock_.Now() + kFreeRecordLifetime;
  records_.insert_or_assign(dataset, std::move(record));
}

void TenantGate::Update(const std::string& dataset, const DatasetAccess& access) {
  Remember(dataset, access);
}

Status TenantGate::CheckKnown(const PeerIdentity& peer, const std::string& dataset,
                              DatasetOp op) const {
  const Record* record = Find(dataset);
  if (record == nullptr) {
    return AbortedError("this worker has not checked who may use " + dataset +
                        " yet: read it over TCP");
  }
  return CheckDatasetAccess(TenantOf(peer), dataset, record->access, op);
}

std::optional<std::string> TenantGate::OwnerOf(const std::string& dataset) const {
  const Record* record = Find(dataset);
  if (record == nullptr || !record->access.owned()) return std::nullopt;
  return record->access.owner;
}

TenantGate::Admission TenantGate::Park(uint64_t ask, IncomingMessage& message) {
  asks_.at(ask).waiting.push_back(std::move(message));
  ++parked_count_;
  return Admission{.parked = true};
}

Result<TenantGate::Admission> TenantGate::AskAndPark(const MasterLink::AccessQuestion& question,
                                                     const std::string& upload,
                                                     IncomingMessage& message) {
  const uint64_t ask = next_ask_++;
  BM_RETURN_IF_ERROR(link_.AskAccess(ask, question));
  asks_.emplace(ask, Ask{question.dataset, question.tenant, upload, {}});
  if (upload.empty()) {
    dataset_asks_[question.dataset] = ask;
  } else {
    upload_asks_[upload] = ask;
  }
  return Park(ask, message);
}

Result<TenantGate::Admission> TenantGate::AdmitRead(const PeerIdentity& peer,
                                                    const std::vector<std::string>& datasets,
                                                    IncomingMessage& message) {
  const std::string tenant = TenantOf(peer);
  for (const std::string& dataset : datasets) {
    if (const Record* record = Find(dataset)) {
      BM_RETURN_IF_ERROR(CheckDatasetAccess(tenant, dataset, record->access, DatasetOp::kRead));
      continue;
    }
    // Unknown here: asked once per dataset, whoever waits for it.
    if (auto asked = dataset_asks_.find(dataset); asked != dataset_asks_.end()) {
      return Park(asked->second, message);
    }
    return AskAndPark(MasterLink::AccessQuestion{.dataset = dataset, .tenant = tenant}, "",
                      message);
  }
  return Admission{};
}

Result<TenantGate::Admission> TenantGate::AdmitPut(const PeerIdentity& peer, const PutInfo& put,
                                                   IncomingMessage& message) {
  // Later pieces wait behind their upload's first piece while its question is out.
  if (auto asked = upload_asks_.find(put.upload); asked != upload_asks_.end()) {
    return Park(asked->second, message);
  }
  if (put.offset != 0) return Admission{};  // the first piece was admitted (or failed)
  if (auto answered = upload_answers_.find(put.upload); answered != upload_answers_.end()) {
    Result<uint64_t> reservation = std::move(answered->second.reservation);
    upload_answers_.erase(answered);
    BM_RETURN_IF_ERROR(reservation.status());
    return Admission{.reservation = *reservation};
  }
  const std::string dataset = DatasetOf(put.block);
  const std::string tenant = TenantOf(peer);
  // Refused without asking when this worker knows the dataset is someone else's.
  if (const Record* record = Find(dataset); record != nullptr && record->access.owned()) {
    BM_RETURN_IF_ERROR(CheckDatasetAccess(tenant, dataset, record->access, DatasetOp::kWrite));
  }
  return AskAndPark(MasterLink::AccessQuestion{.dataset = dataset,
                                               .tenant = tenant,
                                               .claim = true,
                                               .reserve_bytes = put.total_size,
                                               .level = put.level,
                                               .block = put.block.ToString(),
                                               .copies = put.copies,
                                               .version = put.version},
                    put.upload, message);
}

std::vector<TenantGate::Resumed> TenantGate::TakeResumed() {
  std::vector<Resumed> resumed;
  for (MasterLink::AccessAnswer& answer : link_.TakeAccessAnswers()) {
    auto found = asks_.find(answer.ask);
    if (found == asks_.end()) continue;
    Ask ask = std::move(found->second);
    asks_.erase(found);
    Status failed;
    if (ask.upload.empty()) {
      dataset_asks_.erase(ask.dataset);
      if (answer.grant.ok()) {
        Remember(ask.dataset, answer.grant->access);
      } else {
        failed = answer.grant.status();
      }
    } else {
      upload_asks_.erase(ask.upload);
      if (answer.grant.ok()) {
        Remember(ask.dataset, answer.grant->access);
        // The dataset may have been someone else's all along (the master refuses such a put
        // only when it reserves bytes for it).
        Status allowed =
            CheckDatasetAccess(ask.tenant, ask.dataset, answer.grant->access, DatasetOp::kWrite);
        upload_answers_.insert_or_assign(
            ask.upload, PutAnswer{allowed.ok() ? Result<uint64_t>(answer.grant->reservation)
                                               : Result<uint64_t>(allowed)});
      } else {
        // The first piece fails with the master's answer; the later ones find no upload.
        upload_answers_.insert_or_assign(ask.upload, PutAnswer{answer.grant.status()});
      }
    }
    for (IncomingMessage& message : ask.waiting) {
      --parked_count_;
      resumed.push_back(Resumed{std::move(message), failed});
    }
  }
  return resumed;
}

}  // namespace bm
