// GET /v2/memory: the memory report as JSON (shape: docs/memory.md, "The memory report").
// The caller routes the request here and owns the source; nothing global is read.
//
// Thread safety: safe from any thread if the source is.
#pragma once

#include "memory/memory_report.h"
#include "server/http/http_server.h"

namespace vramd::http {

// 200 with MemoryReportToJson of a fresh report from `source`.
HttpResponse MemoryReportResponse(const memory::MemoryReportSource& source);

}  // namespace vramd::http
