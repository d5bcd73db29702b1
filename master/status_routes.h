#pragma once

#include "common/http/http_server.h"
#include "master/status_service.h"

namespace bm {

// The master's HTTP endpoints: /healthz, /readyz, /metrics, the REST API under /api/v1/ and the
// HTML pages (/storage, /rdd/ID, /workers, /health). `service` is borrowed and must outlive
// `server`'s serving.
void AddMasterStatusRoutes(HttpServer& server, MasterStatusService& service);

}  // namespace bm
