// The built-in "add_sub" backend, the model of Triton's quick start:
//   OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1, elementwise.
//
// Config contract (LoadModel fails with an InvalidArgument naming the field otherwise):
//   - exactly two inputs, INPUT0 and INPUT1 (either order), neither optional, with equal dims;
//   - one or two outputs from {OUTPUT0, OUTPUT1}, each with the inputs' dims;
//   - one data type for every tensor, TYPE_FP32 or TYPE_INT32.
// INT32 arithmetic wraps modulo 2^32 (two's complement), as the hardware does; it is never
// undefined behaviour. FP32 follows IEEE 754.
//
// Execute computes each configured output into a new buffer. INPUT0 and INPUT1 must have the
// same shape (a -1 dim lets them differ, which is an InvalidArgument at Execute).
//
// Thread safety: AddSubBackend and its models are immutable after LoadModel; safe from any
// thread.
#pragma once

#include <memory>
#include <string_view>

#include "backends/backend.h"

namespace vramd::backends {

class AddSubBackend final : public Backend {
 public:
  static constexpr std::string_view kName = "add_sub";

  std::string_view name() const override { return kName; }
  Result<std::unique_ptr<BackendModel>> LoadModel(const ModelContext& ctx) override;
};

}  // namespace vramd::backends
