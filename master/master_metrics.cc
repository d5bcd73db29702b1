#include "master/master_metrics.h"

#include <array>
#include <string>

#include "common/core/metrics.h"

namespace bm {

std::string MasterMetricsText(const ClusterSnapshot& snapshot) {
  using Type = PrometheusText::Type;
  PrometheusText out;
  const MasterCounters& counters = snapshot.counters;

  out.Single("blockmgr_blocks", Type::kGauge,
             "Distinct blocks the master knows a location of (each counted once, whatever its "
             "copies).",
             static_cast<double>(snapshot.block_count));

  std::array<uint64_t, kWorkerStateCount> by_state{};
  uint64_t memory_capacity = 0, memory_used = 0, disk_capacity = 0, disk_used = 0, copies = 0;
  for (const WorkerStatus& worker : snapshot.workers) {
    ++by_state[static_cast<size_t>(worker.state)];
    memory_capacity += worker.stats.memory_capacity;
    memory_used += worker.stats.memory_used;
    disk_capacity += worker.stats.disk_capacity;
    disk_used += worker.stats.disk_used;
    copies += worker.locations;
  }
  out.Single("blockmgr_block_copies", Type::kGauge,
             "Block copies held by registered workers, as the master's index places them.",
             static_cast<double>(copies));
  out.Family("blockmgr_workers", Type::kGauge, "Registered workers by state.");
  // In the order of the state names.
  for (WorkerState state :
       {WorkerState::kActive, WorkerState::kDecommissioning, WorkerState::kUnconfirmed}) {
    out.Sample("blockmgr_workers", {{"state", std::string(WorkerStateName(state))}},
               static_cast<double>(by_state[static_cast<size_t>(state)]));
  }
  out.Family("blockmgr_cluster_capacity_bytes", Type::kGauge,
             "Storage capacity summed over registered workers, by tier (disk: 0 = unlimited).");
  out.Sample("blockmgr_cluster_capacity_bytes", {{"tier", "memory"}},
             static_cast<double>(memory_capacity));
  out.Sample("blockmgr_cluster_capacity_bytes", {{"tier", "disk"}},
             static_cast<double>(disk_capacity));
  out.Family("blockmgr_cluster_used_bytes", Type::kGauge,
             "Storage used summed over registered workers, by tier.");
  out.Sample("blockmgr_cluster_used_bytes", {{"tier", "memory"}}, static_cast<double>(memory_used));
  out.Sample("blockmgr_cluster_used_bytes", {{"tier", "disk"}}, static_cast<double>(disk_used));
  out.Single("blockmgr_rdds", Type::kGauge, "RDDs registered or with cached blocks.",
             static_cast<double>(snapshot.rdds.size()));
  uint64_t shuffle_partitions = 0;
  uint64_t shuffle_bytes = 0;
  uint64_t committed_maps = 0;
  for (const ShuffleStatus& shuffle : snapshot.shuffles) {
    shuffle_partitions += shuffle.partitions;
    shuffle_bytes += shuffle.bytes;
    committed_maps += shuffle.committed_maps;
  }
  out.Single("blockmgr_shuffles", Type::kGauge, "Shuffles registered (README \"Shuffles\").",
             static_cast<double>(snapshot.shuffles.size()));
  out.Single("blockmgr_shuffle_partitions", Type::kGauge,
             "Reduce partitions of the registered shuffles.",
             static_cast<double>(shuffle_partitions));
  out.Single("blockmgr_shuffle_committed_maps", Type::kGauge,
             "Map attempts committed to the registered shuffles.",
             static_cast<double>(committed_maps));
  out.Single("blockmgr_shuffle_committed_bytes", Type::kGauge,
             "Bytes the committed map attempts wrote, one copy.",
             static_cast<double>(shuffle_bytes));

  out.Family("blockmgr_tenant_bytes", Type::kGauge,
             "Bytes of a tenant's datasets by tier, every copy counted (README \"Tenants, shares "
             "and quotas\").");
  for (const TenantUsage& tenant : snapshot.tenants) {
    out.Sample("blockmgr_tenant_bytes", {{"tenant", tenant.tenant}, {"tier", "memory"}},
               static_cast<double>(tenant.memory_bytes));
    out.Sample("blockmgr_tenant_bytes", {{"tenant", tenant.tenant}, {"tier", "disk"}},
               static_cast<double>(tenant.disk_bytes));
  }
  out.Family("blockmgr_tenant_quota_bytes", Type::kGauge,
             "A tenant's byte quota by tier (tiers without a quota are left out).");
  for (const TenantUsage& tenant : snapshot.tenants) {
    if (tenant.memory_quota > 0) {
      out.Sample("blockmgr_tenant_quota_bytes", {{"tenant", tenant.tenant}, {"tier", "memory"}},
                 static_cast<double>(tenant.memory_quota));
    }
    if (tenant.disk_quota > 0) {
      out.Sample("blockmgr_tenant_quota_bytes", {{"tenant", tenant.tenant}, {"tier", "disk"}},
                 static_cast<double>(tenant.disk_quota));
    }
  }
  out.Family("blockmgr_tenant_reserved_bytes", Type::kGauge,
             "Bytes of a tenant's puts admitted against its quota and not stored yet.");
  for (const TenantUsage& tenant : snapshot.tenants) {
    out.Sample("blockmgr_tenant_reserved_bytes", {{"tenant", tenant.tenant}},
               static_cast<double>(tenant.reserved_bytes));
  }

  out.Family("blockmgr_blocks_lost_total", Type::kCounter,
             "Blocks whose last copy this master recorded lost since it started, by reason "
             "(PROTOCOL.md, \"Lost blocks\").");
  for (int cause = 0; cause < kLostCauseCount; ++cause) {
    out.Sample("blockmgr_blocks_lost_total",
               {{"reason", std::string(LostCauseLabel(static_cast<LostCause>(cause)))}},
               static_cast<double>(snapshot.lost_totals[static_cast<size_t>(cause)]));
  }
  out.Single("blockmgr_lost_blocks", Type::kGauge,
             "Blocks whose last copy was lost that the master keeps a record of (bmctl blocks "
             "--lost).",
             static_cast<double>(snapshot.lost_count));
  out.Single("blockmgr_under_replicated_blocks", Type::kGauge,
             "Blocks with fewer copies than their storage level asks for.",
             static_cast<double>(snapshot.under_replicated));
  out.Single("blockmgr_replication_copies_in_flight", Type::kGauge,
             "Block copies the master has asked workers to make that have not finished.",
             static_cast<double>(snapshot.copies_in_flight));
  out.Single("blockmgr_replication_copies_total", Type::kCounter,
             "Block copies the master started (re-replication and decommission drains).",
             static_cast<double>(counters.copies_started));
  out.Single("blockmgr_digest_mismatch_reports_total", Type::kCounter,
             "Block copies workers reported with a digest other than their version's; not listed, "
             "and verified by their workers.",
             static_cast<double>(counters.digest_mismatch_reports));
  out.Single("blockmgr_worker_registrations_total", Type::kCounter,
             "Worker registrations (first and repeated).",
             static_cast<double>(counters.workers_registered));
  out.Single("blockmgr_worker_drops_total", Type::kCounter,
             "Workers dropped for missing heartbeats.",
             static_cast<double>(counters.workers_dropped));

  const MasterRole& role = snapshot.role;
  out.Single("blockmgr_master_is_leader", Type::kGauge,
             "1 when this master leads (always without --zookeeper), 0 for a standby.",
             role.leader ? 1.0 : 0.0);
  out.Single("blockmgr_master_epoch", Type::kGauge,
             "The leader's epoch as this master knows it (0 without --zookeeper).",
             static_cast<double>(role.epoch));
  out.Single("blockmgr_master_elections_total", Type::kCounter,
             "Elections this master won since it started.",
             static_cast<double>(role.elections_won));
  out.Single("blockmgr_master_standbys_in_sync", Type::kGauge,
             "Leader: standbys that hold every change it acknowledged (may take over).",
             static_cast<double>(role.standbys_in_sync));

  out.Single("blockmgr_compute_leases", Type::kGauge, "Compute leases held now.",
             static_cast<double>(snapshot.leases_held));
  out.Single("blockmgr_compute_lease_grants_total", Type::kCounter,
             "Compute leases granted (getOrCompute: this caller computes the block).",
             static_cast<double>(counters.lease_grants));
  out.Single("blockmgr_compute_lease_waits_total", Type::kCounter,
             "acquireCompute requests that waited behind another holder.",
             static_cast<double>(counters.lease_waits));

  out.Single("blockmgr_journal_writes_total", Type::kCounter,
             "Writes to the master's journal (0 without --state-dir).",
             static_cast<double>(counters.journal_writes));
  out.Single("blockmgr_journal_write_failures_total", Type::kCounter,
             "Journal writes that failed (the master keeps serving from memory).",
             static_cast<double>(counters.journal_failures));
  // Checksum failures are exported once blocks carry checksums.
  out.Family("blockmgr_handshakes_refused_total", Type::kCounter,
             "Handshakes the ZAP handler refused (keys on), by reason: a key not in the "
             "allow-list, or a key holding the most connections one key may have open.");
  out.Sample(
      "blockmgr_handshakes_refused_total", {{"reason", "unknown_key"}},
      static_cast<double>(counters.handshakes_refused - counters.handshakes_refused_at_limit));
  out.Sample("blockmgr_handshakes_refused_total", {{"reason", "connections_per_key"}},
             static_cast<double>(counters.handshakes_refused_at_limit));
  out.Family("blockmgr_refused_total", Type::kCounter,
             "Requests refused by a limit per key (keys on): connections one key may hold "
             "open, worker registrations one key may make a minute.");
  out.Sample("blockmgr_refused_total", {{"limit", "connections_per_key"}},
             static_cast<double>(counters.connections_refused));
  out.Sample("blockmgr_refused_total", {{"limit", "registrations_per_key"}},
             static_cast<double>(counters.registrations_refused));

  out.Family("blockmgr_master_requests_total", Type::kCounter,
             "Requests the master handled, by operation and result.");
  for (size_t i = 0; i < kMasterOpCount; ++i) {
    const std::string op(MasterOpName(static_cast<MasterOp>(i)));
    out.Sample("blockmgr_master_requests_total", {{"op", op}, {"result", "ok"}},
               static_cast<double>(counters.ops[i].ok));
    out.Sample("blockmgr_master_requests_total", {{"op", op}, {"result", "error"}},
               static_cast<double>(counters.ops[i].errors));
  }
  out.Family("blockmgr_master_request_duration_seconds", Type::kHistogram,
             "Time the master's event loop spent on a request, by operation.");
  for (size_t i = 0; i < kMasterOpCount; ++i) {
    if (counters.ops[i].latency.count() == 0) continue;
    out.Histogram("blockmgr_master_request_duration_seconds",
                  {{"op", std::string(MasterOpName(static_cast<MasterOp>(i)))}},
                  counters.ops[i].latency);
  }
  out.Single("blockmgr_snapshot_timestamp_seconds", Type::kGauge,
             "When the master took the state these metrics show (Unix time).",
             snapshot.taken_unix_ms / 1000.0);
  return out.Take();
}

}  // namespace bm
