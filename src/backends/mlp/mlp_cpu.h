// The mlp backend on the CPU: FP32 weights in host memory, GEMMs by OpenBLAS (cblas_sgemm).
//
// Memory, all from VramdServerApi::allocate: the weights are one packed FP32 image (F16 files
// are widened at load) on VRAMD_DEVICE_CPU, charged to the version's owner, made once per
// version and shared by every CPU instance. Each instance owns one workspace: two activation
// buffers of max_batch_size x max_width floats, charged to the instance's owner. Execute
// allocates only its output (VramdOutputs::add).
//
// Thread safety: CpuWeights changes only while its model sleeps or wakes, when no instance runs;
// otherwise it is only read. An instance is used by one thread at a time (the C
// ABI's contract). OpenBLAS may be called from several instances at once.
#pragma once

#include <memory>

#include "backends/abi/backend_kit.h"
#include "backends/mlp/mlp_plan.h"
#include "backends/mlp/safetensors.h"

namespace vramd::backends::mlp {

struct CpuWeights {
  PackedLayout layout;  // FP32
  abi::Allocation buffer;
  const float* at(size_t byte_offset) const {
    return reinterpret_cast<const float*>(static_cast<const std::byte*>(buffer.data()) +
                                          byte_offset);
  }
};

// Packs `file`'s weights as FP32 into host memory charged to `owner`. ResourceExhausted when the
// host allocation fails.
Result<std::shared_ptr<CpuWeights>> MakeCpuWeights(const safetensors::File& file,
                                                         const MlpPlan& plan,
                                                         const VramdServerApi* server,
                                                         VramdOwner owner);

// A CPU instance; its workspace is charged to info.owner.
Result<std::unique_ptr<MlpInstance>> CreateCpuInstance(std::shared_ptr<const MlpPlan> plan,
                                                       std::shared_ptr<const CpuWeights> weights,
                                                       const VramdServerApi* server,
                                                       const VramdInstanceInfo& info);

}  // namespace vramd::backends::mlp
