#include "master/status_routes.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <string>
#include <vector>

#include "common/core/metrics.h"
#include "master/master_metrics.h"
#include "master/status_json.h"
#include "master/status_pages.h"

namespace bm {
namespace {

using json = nlohmann::ordered_json;

constexpr size_t kDefaultPageRows = 100;
constexpr size_t kMaxPageRows = 1000;
constexpr size_t kMaxLocationIds = 1000;
constexpr size_t kMaxRddRows = 10000;

HttpResponse JsonReply(const json& body) { return HttpResponse::Json(200, body.dump(2) + "\n"); }

HttpResponse JsonError(int status, const std::string& message) {
  return HttpResponse::Json(status, json{{"error", message}}.dump() + "\n");
}

Result<uint64_t> ParseNumber(const std::string& name, const std::string& text) {
  uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    return InvalidArgumentError(name + " must be a non-negative integer, got '" + text + "'");
  }
  return value;
}

// A page request: ?cursor=BLOCK&limit=N.
struct PageParams {
  std::optional<BlockId> cursor;
  size_t limit = kDefaultPageRows;
};

Result<PageParams> ParsePage(const HttpRequest& request) {
  PageParams page;
  if (const std::string cursor = request.Param("cursor"); !cursor.empty()) {
    BM_ASSIGN_OR_RETURN(BlockId id, BlockId::Parse(cursor));
    page.cursor = id;
  }
  if (const std::string limit = request.Param("limit"); !limit.empty()) {
    BM_ASSIGN_OR_RETURN(uint64_t value, ParseNumber("limit", limit));
    if (value == 0 || value > kMaxPageRows) {
      return InvalidArgumentError("limit must be between 1 and " + std::to_string(kMaxPageRows));
    }
    page.limit = value;
  }
  return page;
}

const RddStatus* FindRdd(const ClusterSnapshot& snapshot, uint64_t id) {
  for (const RddStatus& rdd : snapshot.rdds) {
    if (rdd.id == id) return &rdd;
  }
  return nullptr;
}

struct RddDetail {
  std::optional<std::vector<RddDistribution>> distribution;  // none when too big to compute
  BlockPage partitions;
};

// The spread over workers scans the RDD's blocks on the loop; past this many it is left out
// (null) rather than pause block traffic.
// TODO(scale): per-worker totals kept by the index would make it free at any size.
constexpr uint64_t kMaxDistributionBlocks = 200000;

Result<RddDetail> AskRddDetail(MasterStatusService& service, const RddStatus& rdd,
                               const PageParams& page) {
  const bool spread = rdd.cached_partitions <= kMaxDistributionBlocks;
  return service.Ask<RddDetail>([rdd_id = rdd.id, spread, page](const MasterView& view) {
    RddDetail detail;
    if (spread) detail.distribution = QueryRddDistribution(view, rdd_id);
    detail.partitions = QueryBlockPage(view, rdd_id, page.cursor, page.limit);
    return detail;
  });
}

HttpResponse Unavailable(const std::string& why) {
  return HttpResponse::Text(503, "unavailable: " + why + "\n");
}

constexpr const char* kNoSnapshot = "the master's event loop has not answered yet";

// Probes and metrics.
void AddProbeRoutes(HttpServer& server, MasterStatusService& service) {
  server.AddProbeRoute("/healthz",
                       [](const HttpRequest&) { return HttpResponse::Text(200, "ok\n"); });
  // Ready once the loop answers: the journal is loaded and requests are being served.
  server.AddProbeRoute("/readyz", [&service](const HttpRequest&) {
    // A standby is alive but not ready: it answers requests meant for the leader with
    // notLeader, so a Service should route to the leader only.
    Result<MasterRole> role =
        service.Ask<MasterRole>([](const MasterView& view) { return view.role; });
    if (!role.ok()) return Unavailable(role.status().message());
    if (!role->leader) {
      return Unavailable(
          "a standby master; the leader is " +
          (role->leader_address.empty() ? std::string("not known yet") : role->leader_address) +
          " (epoch " + std::to_string(role->epoch) + ")");
    }
    return HttpResponse::Text(200, "ready\n");
  });
  server.AddRoute("/metrics", [&service](const HttpRequest&) {
    std::shared_ptr<const ClusterSnapshot> snapshot = service.Snapshot();
    if (!snapshot) return Unavailable(kNoSnapshot);
    return HttpResponse{200, PrometheusText::kContentType, MasterMetricsText(*snapshot), {}};
  });
}

void AddRestRoutes(HttpServer& server, MasterStatusService& service) {
  // An array as in Spark's API, a page at a time: RDDs after ?cursor=ID (exclusive), at most
  // ?limit=N (default and maximum kMaxRddRows); X-Next-Cursor names the next page's cursor.
  server.AddRoute("/api/v1/rdds", [&service](const HttpRequest& request) {
    std::optional<uint64_t> after;
    if (const std::string cursor = request.Param("cursor"); !cursor.empty()) {
      Result<uint64_t> id = ParseNumber("cursor", cursor);
      if (!id.ok()) return JsonError(400, id.status().message());
      after = *id;
    }
    size_t limit = kMaxRddRows;
    if (const std::string text = request.Param("limit"); !text.empty()) {
      Result<uint64_t> value = ParseNumber("limit", text);
      if (!value.ok() || *value == 0 || *value > kMaxRddRows) {
        return JsonError(400, "limit must be between 1 and " + std::to_string(kMaxRddRows));
      }
      limit = *value;
    }
    std::shared_ptr<const ClusterSnapshot> snapshot = service.Snapshot();
    if (!snapshot) return JsonError(503, kNoSnapshot);
    const std::vector<RddStatus>& rdds = snapshot->rdds;  // by id
    auto first =
        after ? std::upper_bound(rdds.begin(), rdds.end(), *after,
                                 [](uint64_t id, const RddStatus& rdd) { return id < rdd.id; })
              : rdds.begin();
    const auto last = first + std::min<ptrdiff_t>(limit, rdds.end() - first);
    json out = json::array();
    for (auto it = first; it != last; ++it) out.push_back(RddToJson(*it));
    HttpResponse response = JsonReply(out);
    if (last != rdds.end())
      response.headers.emplace_back("X-Next-Cursor", std::to_string((last - 1)->id));
    return response;
  });
  server.AddRoute(R"(/api/v1/rdds/(\d+))", [&service](const HttpRequest& request) {
    Result<uint64_t> rdd_id = ParseNumber("RDD id", request.captures.at(0));
    if (!rdd_id.ok()) return JsonError(400, rdd_id.status().message());
    Result<PageParams> page = ParsePage(request);
    if (!page.ok()) return JsonError(400, page.status().message());
    std::shared_ptr<const ClusterSnapshot> snapshot = service.Snapshot();
    if (!snapshot) return JsonError(503, kNoSnapshot);
    const RddStatus* rdd = FindRdd(*snapshot, *rdd_id);
    if (rdd == nullptr) return JsonError(404, "no RDD " + std::to_string(*rdd_id));
    Result<RddDetail> detail = AskRddDetail(service, *rdd, *page);
    if (!detail.ok()) return JsonError(503, detail.status().message());
    return JsonReply(RddDetailToJson(*rdd, detail->distribution, detail->partitions));
  });
  // Tenants by name: bytes per tier (every copy), quotas (0: none), bytes being put, datasets.
  server.AddRoute("/api/v1/tenants", [&service](const HttpRequest&) {
    std::shared_ptr<const ClusterSnapshot> snapshot = service.Snapshot();
    if (!snapshot) return JsonError(503, kNoSnapshot);
    json out = json::array();
    for (const TenantUsage& tenant : snapshot->tenants) {
      out.push_back({{"tenant", tenant.tenant},
                     {"memory_bytes", tenant.memory_bytes},
                     {"disk_bytes", tenant.disk_bytes},
                     {"memory_quota", tenant.memory_quota},
                     {"disk_quota", tenant.disk_quota},
                     {"reserved_bytes", tenant.reserved_bytes},
                     {"datasets", tenant.datasets}});
    }
    return JsonReply(out);
  });
  server.AddRoute("/api/v1/shuffles", [&service](const HttpRequest&) {
    std::shared_ptr<const ClusterSnapshot> snapshot = service.Snapshot();
    if (!snapshot) return JsonError(503, kNoSnapshot);
    return JsonReply(ShufflesToJson(*snapshot));
  });
  server.AddRoute("/api/v1/workers", [&service](const HttpRequest&) {
    std::shared_ptr<const ClusterSnapshot> snapshot = service.Snapshot();
    if (!snapshot) return JsonError(503, kNoSnapshot);
    return JsonReply(WorkersToJson(*snapshot));
  });
  server.AddRoute("/api/v1/health", [&service](const HttpRequest&) {
    std::shared_ptr<const ClusterSnapshot> snapshot = service.Snapshot();
    if (!snapshot) return JsonError(503, kNoSnapshot);
    return JsonReply(HealthToJson(*snapshot));
  });
  server.AddRoute("/api/v1/blocks", [&service](const HttpRequest& request) {
    Result<PageParams> page = ParsePage(request);
    if (!page.ok()) return JsonError(400, page.status().message());
    if (const std::string state = request.Param("state"); !state.empty()) {
      if (state != "lost") return JsonError(400, "state must be 'lost'");
      // The newest `limit` lost blocks (the master keeps a bounded number).
      struct Lost {
        std::vector<LostRecord> records;
        uint64_t kept = 0;
      };
      Result<Lost> lost = service.Ask<Lost>([limit = page->limit](const MasterView& view) {
        return Lost{QueryLostBlocks(view, limit), view.lost ? view.lost->size() : 0};
      });
      if (!lost.ok()) return JsonError(503, lost.status().message());
      return JsonReply(LostBlocksToJson(lost->records, lost->kept));
    }
    std::optional<uint64_t> rdd;
    if (const std::string text = request.Param("rdd"); !text.empty()) {
      Result<uint64_t> id = ParseNumber("rdd", text);
      if (!id.ok()) return JsonError(400, id.status().message());
      rdd = *id;
    }
    Result<BlockPage> blocks = service.Ask<BlockPage>([rdd, page = *page](const MasterView& view) {
      return QueryBlockPage(view, rdd, page.cursor, page.limit);
    });
    if (!blocks.ok()) return JsonError(503, blocks.status().message());
    return JsonReply(BlockPageToJson(*blocks));
  });
  server.AddRoute("/api/v1/locations", [&service](const HttpRequest& request) {
    std::vector<BlockId> ids;
    // ?ids=a,b,c and/or repeated ?ids=a&ids=b
    auto [first, last] = request.params.equal_range("ids");
    for (auto it = first; it != last; ++it) {
      const std::string& list = it->second;
      size_t start = 0;
      while (start <= list.size()) {
        const size_t comma = std::min(list.find(',', start), list.size());
        const std::string text = list.substr(start, comma - start);
        start = comma + 1;
        if (text.empty()) continue;
        Result<BlockId> id = BlockId::Parse(text);
        if (!id.ok()) return JsonError(400, id.status().message());
        ids.push_back(*id);
        if (ids.size() > kMaxLocationIds) {
          return JsonError(400, "at most " + std::to_string(kMaxLocationIds) + " ids per request");
        }
      }
    }
    if (ids.empty()) return JsonError(400, "give block ids as ?ids=rdd_1_0,rdd_1_1");
    Result<std::vector<BlockRow>> rows = service.Ask<std::vector<BlockRow>>(
        [ids](const MasterView& view) { return QueryLocations(view, ids); });
    if (!rows.ok()) return JsonError(503, rows.status().message());
    return JsonReply(LocationsToJson(*rows));
  });
}

void AddPageRoutes(HttpServer& server, MasterStatusService& service) {
  auto storage = [&service](const HttpRequest& request) {
    Result<uint64_t> page = ParseNumber("page", request.Param("page", "0"));
    if (!page.ok()) return HttpResponse::Text(400, page.status().message() + "\n");
    std::shared_ptr<const ClusterSnapshot> snapshot = service.Snapshot();
    if (!snapshot) return Unavailable(kNoSnapshot);
    return HttpResponse::Html(StatusPages::Storage(*snapshot, *page));
  };
  server.AddRoute("/", storage);
  server.AddRoute("/storage", storage);
  server.AddRoute(R"(/rdd/(\d+))", [&service](const HttpRequest& request) {
    Result<uint64_t> rdd_id = ParseNumber("RDD id", request.captures.at(0));
    Result<PageParams> page = ParsePage(request);
    if (!rdd_id.ok() || !page.ok()) {
      return HttpResponse::Text(400,
                                (rdd_id.ok() ? page.status() : rdd_id.status()).message() + "\n");
    }
    std::shared_ptr<const ClusterSnapshot> snapshot = service.Snapshot();
    if (!snapshot) return Unavailable(kNoSnapshot);
    const RddStatus* rdd = FindRdd(*snapshot, *rdd_id);
    if (rdd == nullptr) {
      HttpResponse response = HttpResponse::Html(StatusPages::Message(
          "RDD " + std::to_string(*rdd_id), "No RDD with this id is registered or cached."));
      response.status = 404;
      return response;
    }
    Result<RddDetail> detail = AskRddDetail(service, *rdd, *page);
    if (!detail.ok()) return Unavailable(detail.status().message());
    return HttpResponse::Html(
        StatusPages::Rdd(*rdd, detail->distribution, detail->partitions, request.Param("cursor")));
  });
  server.AddRoute("/workers", [&service](const HttpRequest&) {
    std::shared_ptr<const ClusterSnapshot> snapshot = service.Snapshot();
    if (!snapshot) return Unavailable(kNoSnapshot);
    return HttpResponse::Html(StatusPages::Workers(*snapshot));
  });
  server.AddRoute("/health", [&service](const HttpRequest&) {
    std::shared_ptr<const ClusterSnapshot> snapshot = service.Snapshot();
    if (!snapshot) return Unavailable(kNoSnapshot);
    return HttpResponse::Html(StatusPages::Health(*snapshot));
  });
}

}  // namespace

void AddMasterStatusRoutes(HttpServer& server, MasterStatusService& service) {
  AddProbeRoutes(server, service);
  AddRestRoutes(server, service);
  AddPageRoutes(server, service);
}

}  // namespace bm
