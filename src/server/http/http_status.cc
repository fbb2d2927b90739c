#include "server/http/http_status.h"

namespace vramd::http {

unsigned HttpStatusFor(StatusCode code) {
  switch (code) {
    case StatusCode::kNotFound: return 404;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kUnsupported: return 501;
    case StatusCode::kInternal: return 500;
    default: return 400;
  }
}

}  // namespace vramd::http
