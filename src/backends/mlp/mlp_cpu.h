// The mlp backend on the CPU: FP32 weights in host memory, GEMMs by OpenBLAS (cblas_sgemm).
//
// Memory: the weights are one packed FP32 image (F16 files are widened at load) taken from the
// allocator on Device::Cpu() and charged to the version's owner, made once per version and
// shared by every CPU instance. Each instance owns one workspace: two activation buffers of
// max_batch_size x max_width floats, charged to the instance's owner. Execute allocates only
// its output tensor (a HostBuffer).
//
// Thread safety: CpuWeights is immutable; an instance is used by one thread at a time
// (BackendInstance's contract). OpenBLAS may be called from several instances at once.
#pragma once

#include <memory>

#include "backends/backend.h"
#include "backends/mlp/mlp_plan.h"
#include "backends/mlp/safetensors.h"
#include "memory/allocator.h"

namespace vramd::backends::mlp {

struct CpuWeights {
  PackedLayout layout;  // FP32
  memory::Buffer buffer;
  const float* at(size_t byte_offset) const {
    return reinterpret_cast<const float*>(static_cast<const std::byte*>(buffer.data()) +
                                          byte_offset);
  }
};

// Packs `file`'s weights as FP32 into host memory charged to `owner`. ResourceExhausted when the
// host allocation fails.
Result<std::shared_ptr<const CpuWeights>> MakeCpuWeights(const safetensors::File& file,
                                                         const MlpPlan& plan,
                                                         memory::Allocator* allocator,
                                                         memory::OwnerId owner);

// A CPU instance; its workspace is charged to ctx.owner.
Result<std::unique_ptr<BackendInstance>> CreateCpuInstance(std::shared_ptr<const MlpPlan> plan,
                                                           std::shared_ptr<const CpuWeights> weights,
                                                           memory::Allocator* allocator,
                                                           const InstanceContext& ctx);

}  // namespace vramd::backends::mlp
