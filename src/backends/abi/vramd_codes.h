// VramdCode (include/vramd/backend.h) against vramd's StatusCode, and a backend's error as a
// Status: the one mapping both sides of the ABI use, the server (abi_bridge.h) and the
// out-of-process backend host (backends/remote/), which links no server.
//
// Thread safety: plain functions.
#pragma once

#include <string_view>

#include "core/status.h"
#include "vramd/backend.h"

namespace vramd::backends::abi {

VramdCode ToVramdCode(StatusCode code);
StatusCode ToStatusCode(VramdCode code);

// A backend's failure as a Status: the code mapped, the message prefixed with `context` and ": "
// unless `context` is empty (an empty message says the backend gave none; an unknown code is
// named).
Status FromVramd(VramdCode code, const VramdError& error, std::string_view context);

// Writes `message` into `error` (may be null), truncated and NUL-terminated.
void SetError(VramdError* error, std::string_view message);

}  // namespace vramd::backends::abi
