#include "worker/worker_status.h"

#include "common/http/http_server.h"
#include "worker/block_manager.h"

namespace bm {

std::string_view WorkerOpName(WorkerOp op) {
  switch (op) {
    case WorkerOp::kPut:
      return "put";
    case WorkerOp::kGet:
      return "get";
    case WorkerOp::kGetMany:
      return "get_many";
    case WorkerOp::kContains:
      return "contains";
    case WorkerOp::kRemove:
      return "remove";
    case WorkerOp::kReplicate:
      return "replicate";
    case WorkerOp::kDecommission:
      return "decommission";
    case WorkerOp::kShutdown:
      return "shutdown";
    case WorkerOp::kPing:
      return "ping";
    case WorkerOp::kShufflePush:
      return "shuffle_push";
    case WorkerOp::kShuffleRead:
      return "shuffle_read";
    case WorkerOp::kOther:
      return "other";
  }
  return "other";
}

std::string_view RequestResultName(size_t result) {
  static constexpr std::string_view kNames[kRequestResultCount] = {
      "ok", "not_found", "out_of_space", "unavailable", "invalid", "error"};
  return result < kRequestResultCount ? kNames[result] : "error";
}

size_t RequestResultOf(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return 0;
    case StatusCode::kNotFound:
      return 1;
    case StatusCode::kOutOfSpace:
      return 2;
    case StatusCode::kUnavailable:
      return 3;
    case StatusCode::kInvalidArgument:
    case StatusCode::kTooLarge:
      return 4;
    default:
      return 5;
  }
}

void WorkerCounters::RecordRequest(WorkerOp op, const Status& status, Duration elapsed) {
  PerOp& counters = ops[static_cast<size_t>(op)];
  ++counters.results[RequestResultOf(status)];
  counters.latency.Observe(elapsed);
}

WorkerSnapshot BuildWorkerSnapshot(const WorkerView& view) {
  const WorkerStats stats = view.blocks.Stats();
  WorkerSnapshot snapshot;
  snapshot.worker_id = view.worker_id;
  snapshot.registered = view.registered;
  snapshot.master_refusal = view.master_refusal;
  snapshot.heartbeat_delays = view.heartbeat_delays;
  snapshot.worst_heartbeat_delay = view.worst_heartbeat_delay;
  snapshot.decommissioning = view.decommissioning;
  snapshot.memory_capacity = stats.memory_capacity;
  snapshot.memory_used = stats.memory_used;
  snapshot.disk_capacity = stats.disk_capacity;
  snapshot.disk_used = stats.disk_used;
  snapshot.disks = stats.disks;
  snapshot.memory_blocks = view.blocks.memory_block_count();
  snapshot.disk_blocks = view.blocks.disk_block_count();
  snapshot.evictions = view.blocks.evictions();
  snapshot.spills = view.blocks.spills();
  snapshot.corrupt_spills = view.blocks.corrupt_spills();
  snapshot.spill_backlog_bytes = view.blocks.spill_backlog_bytes();
  snapshot.storage_jobs = view.blocks.storage_jobs_outstanding();
  snapshot.corrupt_disk_blocks = view.blocks.corrupt_disk_blocks();
  snapshot.scrubbed_bytes = view.blocks.scrubbed_bytes();
  snapshot.uploads_in_progress = view.uploads_in_progress;
  snapshot.pinned_bytes = view.blocks.pinned_bytes();
  snapshot.local_readers = view.local_readers;
  snapshot.local_pins = view.local_pins;
  snapshot.local_pins_expired = view.local_pins_expired;
  snapshot.local_arena_blocks = view.local_arena_blocks;
  snapshot.counters = view.counters;
  return snapshot;
}

std::string WorkerMetricsText(const WorkerSnapshot& snapshot) {
  using Type = PrometheusText::Type;
  PrometheusText out;
  auto number = [](uint64_t value) { return static_cast<double>(value); };
  out.Family("blockmgr_worker_capacity_bytes", Type::kGauge,
             "Storage this worker may use, by tier (disk: 0 = unlimited).");
  out.Sample("blockmgr_worker_capacity_bytes", {{"tier", "memory"}},
             number(snapshot.memory_capacity));
  out.Sample("blockmgr_worker_capacity_bytes", {{"tier", "disk"}}, number(snapshot.disk_capacity));
  out.Family("blockmgr_worker_used_bytes", Type::kGauge,
             "Storage this worker uses (blocks and uploads in progress), by tier.");
  out.Sample("blockmgr_worker_used_bytes", {{"tier", "memory"}}, number(snapshot.memory_used));
  out.Sample("blockmgr_worker_used_bytes", {{"tier", "disk"}}, number(snapshot.disk_used));
  out.Family("blockmgr_worker_disk_capacity_bytes", Type::kGauge,
             "Space each disk (--disk-dir) may hold now: its limit, or less when its "
             "filesystem has less; 0 once failed.");
  for (const DiskStats& disk : snapshot.disks) {
    out.Sample("blockmgr_worker_disk_capacity_bytes", {{"disk", disk.path}}, number(disk.capacity));
  }
  out.Family("blockmgr_worker_disk_used_bytes", Type::kGauge, "Space each disk's blocks use.");
  for (const DiskStats& disk : snapshot.disks) {
    out.Sample("blockmgr_worker_disk_used_bytes", {{"disk", disk.path}}, number(disk.used));
  }
  out.Family("blockmgr_worker_disk_failed", Type::kGauge,
             "1 once the disk has failed (an I/O error or a hang; its blocks were reported "
             "lost), else 0.");
  uint64_t failed_disks = 0;
  for (const DiskStats& disk : snapshot.disks) {
    const bool failed = disk.state == DiskState::kFailed;
    failed_disks += failed ? 1 : 0;
    out.Sample("blockmgr_worker_disk_failed", {{"disk", disk.path}}, failed ? 1 : 0);
  }
  out.Family("blockmgr_worker_disk_read_only", Type::kGauge,
             "1 while the disk takes no new blocks after a storage error (full), else 0.");
  for (const DiskStats& disk : snapshot.disks) {
    out.Sample("blockmgr_worker_disk_read_only", {{"disk", disk.path}},
               disk.state == DiskState::kReadOnly ? 1 : 0);
  }
  out.Single("blockmgr_worker_disks_failed_total", Type::kCounter,
             "Disks of this worker that have failed since it started.", number(failed_disks));
  out.Family("blockmgr_worker_blocks", Type::kGauge, "Blocks this worker holds, by tier.");
  out.Sample("blockmgr_worker_blocks", {{"tier", "memory"}}, number(snapshot.memory_blocks));
  out.Sample("blockmgr_worker_blocks", {{"tier", "disk"}}, number(snapshot.disk_blocks));
  out.Single("blockmgr_worker_evictions_total", Type::kCounter,
             "Blocks evicted from memory to make room (spilled to disk or dropped).",
             number(snapshot.evictions));
  out.Single("blockmgr_worker_spills_total", Type::kCounter,
             "Evicted MEMORY_AND_DISK blocks written to disk.", number(snapshot.spills));
  out.Single("blockmgr_worker_spill_backlog_bytes", Type::kGauge,
             "Bytes of evicted blocks still in memory, waiting for their spill to disk.",
             number(snapshot.spill_backlog_bytes));
  out.Single("blockmgr_worker_storage_jobs", Type::kGauge,
             "Disk reads, writes, removals and spills queued or running on the storage thread.",
             number(snapshot.storage_jobs));
  out.Single("blockmgr_worker_read_bytes_total", Type::kCounter,
             "Block bytes sent in replies to gets.", number(snapshot.counters.bytes_read));
  out.Single("blockmgr_worker_written_bytes_total", Type::kCounter, "Block bytes received in puts.",
             number(snapshot.counters.bytes_written));
  out.Single("blockmgr_worker_shuffle_pieces_pushed_total", Type::kCounter,
             "Shuffle pieces pushed and kept (a repeated piece counts once).",
             number(snapshot.counters.shuffle_pieces_pushed));
  out.Single("blockmgr_worker_shuffle_pushed_bytes_total", Type::kCounter,
             "Bytes of the shuffle pieces pushed and kept.",
             number(snapshot.counters.shuffle_bytes_pushed));
  out.Single("blockmgr_worker_shuffle_flushed_bytes_total", Type::kCounter,
             "Bytes of shuffle pieces written to partition files on disk (headers included).",
             number(snapshot.counters.shuffle_bytes_flushed));
  out.Single("blockmgr_worker_shuffle_forwarded_bytes_total", Type::kCounter,
             "Bytes of shuffle pieces this worker, as a stream's primary, forwarded to its "
             "replica and the replica took.",
             number(snapshot.counters.shuffle_bytes_forwarded));
  out.Single("blockmgr_worker_shuffle_read_bytes_total", Type::kCounter,
             "Bytes of shuffle pieces sent to readers.",
             number(snapshot.counters.shuffle_bytes_read));
  out.Family("blockmgr_worker_shuffle_local_pages_total", Type::kCounter,
             "Pages of shuffle pieces sent to readers on this host over the local-read socket "
             "(their bytes count in blockmgr_worker_shuffle_read_bytes_total too), by where "
             "the bytes were: the reply's trailer (pieces in memory), a sealed region (a page too "
             "big for a packet), the partition file (mapped by the reader).");
  out.Sample("blockmgr_worker_shuffle_local_pages_total", {{"bytes", "trailer"}},
             number(snapshot.counters.shuffle_local_pages_trailer));
  out.Sample("blockmgr_worker_shuffle_local_pages_total", {{"bytes", "region"}},
             number(snapshot.counters.shuffle_local_pages_region));
  out.Sample("blockmgr_worker_shuffle_local_pages_total", {{"bytes", "file"}},
             number(snapshot.counters.shuffle_local_pages_file));
  out.Family("blockmgr_worker_refused_total", Type::kCounter,
             "Requests refused by a limit per key: connections one key may hold open, uploads "
             "one key may have in progress.");
  out.Sample("blockmgr_worker_refused_total", {{"limit", "connections_per_key"}},
             number(snapshot.counters.connections_refused));
  out.Sample("blockmgr_worker_refused_total", {{"limit", "uploads_per_key"}},
             number(snapshot.counters.uploads_refused_per_key));
  out.Single("blockmgr_worker_uploads_in_progress", Type::kGauge, "Puts started, not committed.",
             number(snapshot.uploads_in_progress));
  out.Single("blockmgr_worker_registered", Type::kGauge,
             "1 while the worker is registered with the master.", snapshot.registered ? 1 : 0);
  out.Single("blockmgr_worker_decommissioning", Type::kGauge,
             "1 while the master drains this worker.", snapshot.decommissioning ? 1 : 0);
  out.Family("blockmgr_worker_checksum_failures_total", Type::kCounter,
             "Block bytes that failed a checksum, by where: transit (a put piece, refused and "
             "resent), disk and memory (a stored copy, dropped and reported lost), client-read "
             "(a reader's bytes, the stored copy being intact: corrupted on the way).");
  out.Sample("blockmgr_worker_checksum_failures_total", {{"where", "transit"}},
             number(snapshot.counters.checksum_failures_transit));
  out.Sample("blockmgr_worker_checksum_failures_total", {{"where", "disk"}},
             number(snapshot.corrupt_disk_blocks));
  out.Sample("blockmgr_worker_checksum_failures_total", {{"where", "memory"}},
             number(snapshot.counters.checksum_failures_memory + snapshot.corrupt_spills));
  out.Sample("blockmgr_worker_checksum_failures_total", {{"where", "client-read"}},
             number(snapshot.counters.checksum_failures_read_transit));
  out.Single("blockmgr_worker_scrubbed_bytes_total", Type::kCounter,
             "Disk block bytes the scrubber re-read and verified (--scrub-rate).",
             number(snapshot.scrubbed_bytes));

  out.Family("blockmgr_worker_block_reads_total", Type::kCounter,
             "Whole-block reads, by origin: local (a reader on this host: over the local-read "
             "socket, or over TCP from one of this host's addresses) or remote.");
  out.Sample("blockmgr_worker_block_reads_total", {{"origin", "local"}},
             number(snapshot.counters.block_reads_local));
  out.Sample("blockmgr_worker_block_reads_total", {{"origin", "remote"}},
             number(snapshot.counters.block_reads_remote));
  out.Single("blockmgr_worker_local_read_bytes_total", Type::kCounter,
             "Block bytes handed to readers on this host through shared memory (or inline).",
             number(snapshot.counters.local_read_bytes));
  out.Single("blockmgr_worker_local_arena_reads_total", Type::kCounter,
             "Gets readers on this host served from a small-block arena, without asking (as "
             "they reported them).",
             number(snapshot.counters.local_arena_reads));
  out.Single("blockmgr_worker_local_reads_refused_total", Type::kCounter,
             "Local-read connections and requests refused (another uid, no valid ticket, a key "
             "that may not read, a malformed request).",
             number(snapshot.counters.local_reads_refused));
  out.Single("blockmgr_worker_pinned_bytes", Type::kGauge,
             "Bytes readers on this host keep mapped (counted in the memory used).",
             number(snapshot.pinned_bytes));
  out.Single("blockmgr_worker_local_readers", Type::kGauge,
             "Readers connected to the local-read socket.", number(snapshot.local_readers));
  out.Single("blockmgr_worker_pins", Type::kGauge, "Regions readers on this host hold pinned.",
             number(snapshot.local_pins));
  out.Single("blockmgr_worker_pins_expired_total", Type::kCounter,
             "Pins dropped because their reader kept them past the pin lifetime.",
             number(snapshot.local_pins_expired));
  out.Single("blockmgr_worker_local_arena_blocks", Type::kGauge,
             "Small blocks copied into the small-block arenas, which readers on this host read "
             "without asking the worker.",
             number(snapshot.local_arena_blocks));

  out.Family("blockmgr_worker_requests_total", Type::kCounter,
             "Requests the worker handled, by operation and result (gets and puts included).");
  for (size_t op = 0; op < kWorkerOpCount; ++op) {
    for (size_t result = 0; result < kRequestResultCount; ++result) {
      const uint64_t count = snapshot.counters.ops[op].results[result];
      // Every op's ok and error series exist from the start; rarer outcomes once they happen.
      if (count == 0 && result != 0 && result != kRequestResultCount - 1) continue;
      out.Sample("blockmgr_worker_requests_total",
                 {{"op", std::string(WorkerOpName(static_cast<WorkerOp>(op)))},
                  {"result", std::string(RequestResultName(result))}},
                 number(count));
    }
  }
  out.Family("blockmgr_worker_heartbeat_delay_seconds", Type::kHistogram,
             "How late each heartbeat to the master went out against when it was due (the "
             "worker's loop busy with other work).");
  out.Histogram("blockmgr_worker_heartbeat_delay_seconds", {}, snapshot.heartbeat_delays);
  out.Single("blockmgr_worker_heartbeat_delay_max_seconds", Type::kGauge,
             "The latest any heartbeat went out since the worker started.",
             std::chrono::duration<double>(snapshot.worst_heartbeat_delay).count());
  out.Family("blockmgr_worker_request_duration_seconds", Type::kHistogram,
             "Time the worker's event loop spent on a request piece, by operation.");
  for (size_t op = 0; op < kWorkerOpCount; ++op) {
    if (snapshot.counters.ops[op].latency.count() == 0) continue;
    out.Histogram("blockmgr_worker_request_duration_seconds",
                  {{"op", std::string(WorkerOpName(static_cast<WorkerOp>(op)))}},
                  snapshot.counters.ops[op].latency);
  }
  return out.Take();
}

Result<std::unique_ptr<WorkerStatusService>> WorkerStatusService::Create() {
  BM_ASSIGN_OR_RETURN(std::unique_ptr<LoopQueries<WorkerView>> queries,
                      LoopQueries<WorkerView>::Create());
  return std::unique_ptr<WorkerStatusService>(new WorkerStatusService(std::move(queries)));
}

Result<WorkerSnapshot> WorkerStatusService::Snapshot() {
  return queries_->Ask<WorkerSnapshot>(
      [](const WorkerView& view) { return BuildWorkerSnapshot(view); });
}

void AddWorkerStatusRoutes(HttpServer& server, WorkerStatusService& service) {
  server.AddProbeRoute("/healthz",
                       [](const HttpRequest&) { return HttpResponse::Text(200, "ok\n"); });
  server.AddProbeRoute("/readyz", [&service](const HttpRequest&) {
    Result<WorkerSnapshot> snapshot = service.Snapshot();
    if (!snapshot.ok()) return HttpResponse::Text(503, snapshot.status().message() + "\n");
    if (!snapshot->registered && !snapshot->master_refusal.empty()) {
      return HttpResponse::Text(503, "cannot register: " + snapshot->master_refusal + "\n");
    }
    if (!snapshot->registered) {
      return HttpResponse::Text(503, "not registered with the master yet\n");
    }
    return HttpResponse::Text(200, "ready\n");
  });
  server.AddRoute("/metrics", [&service](const HttpRequest&) {
    Result<WorkerSnapshot> snapshot = service.Snapshot();
    if (!snapshot.ok()) return HttpResponse::Text(503, snapshot.status().message() + "\n");
    return HttpResponse{200, PrometheusText::kContentType, WorkerMetricsText(*snapshot), {}};
  });
}

}  // namespace bm
