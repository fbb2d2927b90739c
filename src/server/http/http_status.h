// HttpStatusFor: the HTTP status code a Status becomes in a KServe v2 reply, as Triton maps them.
// Every route that answers an error with {"error": "..."} takes its code from here, so an
// endpoint cannot drift from the others.
//
// Thread safety: a pure function.
#pragma once

#include "core/status.h"

namespace vramd::http {

// NotFound 404, Unavailable 503, Unsupported 501, Internal 500, every other code 400 (a
// request the server refuses as it stands). kOk is not an error and has no code here: 400.
unsigned HttpStatusFor(StatusCode code);

}  // namespace vramd::http
