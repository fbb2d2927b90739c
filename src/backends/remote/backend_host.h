// BackendHost: the backend host process's side (vramd_backend_host, host_main.cc). It serves
// one model of one backend library for vramd over a Peer: model_create, any number of
// instance_create (each instance a thread of this process), execute / execute_requests,
// instance_destroy, model_destroy. The library gets a VramdServerApi whose entry points forward
// to vramd (log, record_load_phase, respond, is_cancelled, infer_async, load_model,
// unload_model, is_model_ready, metric_*) or work locally: host allocate/free (malloc: not in
// vramd's ledger), copy, response building, infer results. GPU allocate is refused
// (VRAMD_UNSUPPORTED): device memory outside vramd's memory:: would be memory no ledger sees;
// the process's own device memory is seen per PID (docs/remote-backends.md).
//
// Threads: the reader thread never calls into the library (a library call may wait for vramd,
// whose answer the reader must deliver); model and instance calls run on a control thread, each
// instance's executes on a thread of its own, infer_async results on a callback thread.
#pragma once

#include <memory>
#include <string>

#include "backends/remote/unique_fd.h"
#include "vramd/backend.h"

namespace vramd::backends::remote {

// Serves until vramd closes the socket; returns the process's exit status (0 after a
// model_destroy, 1 when vramd went away first).
int RunBackendHost(UniqueFd socket, const VramdBackendApi* api, std::string label);

}  // namespace vramd::backends::remote
