#include "master/worker_registry.h"

namespace bm {

bool WorkerRegistry::Register(std::string id, std::string address, const WorkerStats& stats,
                              WorkerLabels labels) {
  WorkerRecord record{id,           std::move(address), stats,
                      clock_.Now(), std::move(labels),  WorkerState::kActive};
  auto [it, added] = workers_.insert_or_assign(std::move(id), std::move(record));
  return !added;
}

void WorkerRegistry::Restore(std::string id, std::string address, WorkerLabels labels) {
  WorkerRecord record{id,           std::move(address), WorkerStats{},
                      clock_.Now(), std::move(labels),  WorkerState::kUnconfirmed};
  workers_.insert_or_assign(std::move(id), std::move(record));
}

Status WorkerRegistry::Decommission(std::string_view id) {
  auto it = workers_.find(id);
  if (it == workers_.end()) {
    return NotFoundError("no live worker named '" + std::string(id.substr(0, 200)) + "'");
  }
  if (it->second.state == WorkerState::kUnconfirmed) {
    return UnavailableError("worker '" + it->first +
                            "' has not registered since the master restarted; retry later");
  }
  it->second.state = WorkerState::kDecommissioning;
  return Status::Ok();
}

void WorkerRegistry::HeardFrom(std::string_view id) {
  auto it = workers_.find(id);
  if (it == workers_.end() || it->second.state == WorkerState::kUnconfirmed) return;
  it->second.last_seen = clock_.Now();
}

Status WorkerRegistry::Touch(std::string_view id, const WorkerStats& stats) {
  auto it = workers_.find(id);
  if (it == workers_.end()) {
    return Status(StatusCode::kUnknownWorker,
                  "worker '" + std::string(id.substr(0, 200)) + "' is not registered");
  }
  if (it->second.state == WorkerState::kUnconfirmed) {
    return Status(StatusCode::kUnknownWorker,
                  "worker '" + std::string(id.substr(0, 200)) +
                      "' has not registered since the master restarted");
  }
  it->second.stats = stats;
  it->second.last_seen = clock_.Now();
  return Status::Ok();
}

bool WorkerRegistry::Remove(std::string_view id) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return false;
  workers_.erase(it);
  return true;
}

const WorkerRecord* WorkerRegistry::Find(std::string_view id) const {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

std::vector<std::string> WorkerRegistry::Expired(Duration timeout) const {
  const TimePoint now = clock_.Now();
  std::vector<std::string> out;
  for (const auto& [id, record] : workers_) {
    if (now - record.last_seen > timeout) out.push_back(id);
  }
  return out;
}

std::vector<WorkerRecord> WorkerRegistry::List() const {
  std::vector<WorkerRecord> out;
  out.reserve(workers_.size());
  for (const auto& [id, record] : workers_) out.push_back(record);
  return out;
}

}  // namespace bm
