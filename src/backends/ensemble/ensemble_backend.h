// The ensemble backend: serves Triton's `platform: "ensemble"` models. An ensemble holds no
// weights; each request walks its EnsembleGraph (ensemble_graph.h), handing every step to the
// step's model through the runtime's one request path (ServerServices::InferAsync), as a
// client's request, so the step models keep their own scheduling, batching and statistics.
//
// Per request: the steps that read only ensemble inputs start at once; a step starts as soon as
// the last tensor it reads exists; steps with nothing between them run at the same time. Tensors
// pass from step to step by reference (no copy), and a step's outputs stay where its model left
// them (on its GPU: the steps ask for kAnyGpu), so GPU steps hand each other device memory; the
// runtime moves what the client gets to host at the end, as for any model. The first step that
// fails ends the request with its error, prefixed with the ensemble and the step; what the other
// steps still answer is dropped. The ensemble's instance does not wait: it answers each request
// through its responder when the last step is done (request lists), so one instance serves any
// number of requests at once.
//
// Loading checks the graph and then each step against the config its model serves with, which
// must therefore be loaded first (the model manager loads ensembles after other models, and in
// explicit mode loads an ensemble's step models with it). A decoupled step model needs a
// decoupled ensemble; each of its responses is carried through the steps after it on its own
// and answered as one response of the ensemble (EnsembleRun in the .cc says how).
#pragma once

#include "backends/backend.h"

namespace vramd::backends {

Backend* EnsembleBackend();

}  // namespace vramd::backends
