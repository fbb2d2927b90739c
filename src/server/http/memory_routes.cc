#include "server/http/memory_routes.h"

namespace vramd::http {

HttpResponse MemoryReportResponse(const memory::MemoryReportSource& source) {
  HttpResponse response;
  response.status = 200;
  response.body = memory::MemoryReportToJson(source.Build());
  return response;
}

}  // namespace vramd::http
