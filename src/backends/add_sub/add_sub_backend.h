// The built-in "add_sub" backend, the model of Triton's quick start:
//   OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1, elementwise.
// Implemented over the backend C ABI (include/vramd/backend.h, abi/backend_kit.h) and linked
// into the server; the runtime reaches it through AbiBackend like any backend library.
//
// Config contract (model_create fails with an InvalidArgument naming the field otherwise):
//   - exactly two inputs, INPUT0 and INPUT1 (either order), neither optional, with equal dims;
//   - one or two outputs from {OUTPUT0, OUTPUT1}, each with the inputs' dims;
//   - one data type for every tensor, TYPE_FP32 or TYPE_INT32.
// INT32 arithmetic wraps modulo 2^32 (two's complement), as the hardware does; it is never
// undefined behaviour. FP32 follows IEEE 754.
//
// Execute computes each configured output into a new buffer. INPUT0 and INPUT1 must have the
// same shape (a -1 dim lets them differ, which is an InvalidArgument at Execute).
//
// Thread safety: a model is immutable after model_create; safe from any thread.
#pragma once

#include "vramd/backend.h"

namespace vramd::backends {

// The backend's table (include/vramd/backend.h), linked into the server.
const VramdBackendApi* AddSubBackendApi();

}  // namespace vramd::backends
