// InferOutcome: what running one request produces, and InferCallback: how it is delivered.
#pragma once

#include <functional>
#include <memory>

#include "core/infer_request.h"
#include "core/status.h"
#include "runtime/request_owner.h"

namespace vramd::runtime {

// Members are destroyed in reverse order: the response first, then the request's owner, whose
// closing checks that the request left nothing behind. Keep it alive until the response has
// been sent.
struct InferOutcome {
  // Keeps the version that ran the request (its instance's ledger owner, the parent of
  // request_owner) alive until the outcome is gone: declared first, destroyed last, so an
  // unload never closes an instance owner under a request that still holds its outputs.
  std::shared_ptr<const void> version_hold;
  RequestOwner request_owner;
  InferResponse response;
};

// Receives a request's outcome, exactly once, on whichever thread finished the request (an
// instance thread, or the caller's own). It must not block for long (it holds up the instance
// that ran the request) and must not destroy the LoadedModel that runs it. The runtime reads
// the request's inputs only before it calls this, so the owner of the request may release
// them here (the HTTP front end frees a large request body before encoding the reply).
using InferCallback = std::function<void(Result<InferOutcome>)>;

}  // namespace vramd::runtime
