// The built-in "identity" backend: every output is one of the inputs, unchanged.
//
// Implemented over the backend C ABI (include/vramd/backend.h, abi/backend_kit.h) and linked
// into the server; the runtime reaches it through AbiBackend like any backend library.
//
// Mapping (decided at load, from the config alone):
//   - by name, as Triton's identity backend: when every output is named "OUTPUT<suffix>" and
//     an input "INPUT<suffix>" exists for each, OUTPUTn returns INPUTn;
//   - otherwise by position: output i returns input i.
// The config must have as many outputs as inputs, no two outputs may return the same input, and
// each output must have its input's data type; anything else fails model_create with an
// InvalidArgument naming the field. Any data type and shape is served.
//
// Execute returns, for each output whose input was sent, a tensor with the output's name and
// config data type, the input's shape, and a copy of the input's bytes. An output whose
// (optional) input was not sent is left out.
//
// Config parameter (optional), for tests and benchmarks of scheduling:
//   parameters { key: "execute_delay_us" value { string_value: "20000" } }
// makes every Execute sleep that many microseconds before answering, whatever the batch size:
// a model whose cost per execution does not depend on how many requests the execution holds,
// so that instance concurrency and dynamic batching show in wall time and throughput. Absent
// or "0": no delay. Anything but a non-negative integer fails model_create with InvalidArgument
// naming the parameter.
//
// Thread safety: a model is immutable after model_create; safe from any thread.
#pragma once

#include <string_view>

#include "vramd/backend.h"

namespace vramd::backends {

inline constexpr std::string_view kIdentityExecuteDelayParameter = "execute_delay_us";

// The backend's table (include/vramd/backend.h), linked into the server.
const VramdBackendApi* IdentityBackendApi();

}  // namespace vramd::backends
