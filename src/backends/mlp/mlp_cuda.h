// The mlp backend on a GPU: weights in device memory in the file's dtype, GEMMs by cuBLAS,
// bias + ReLU by a small kernel (mlp_kernels.h). Built only with CUDA (VRAMD_WITH_CUDA).
//
// Memory, all from VramdServerApi::allocate so the ledger sees every byte:
//  - GpuWeights: one packed image per device (MakeLayout with the file's element size: FP16
//    stays FP16), allocated on the default stream and charged to the version's owner. The model
//    makes it once per device, for the first instance there; every instance on that device
//    reads it, and only reads it, from its own stream.
//  - per instance, charged to the instance's owner and allocated on its stream: cuBLAS's
//    workspace (MlpPlan::cublas_workspace_bytes, set with cublasSetWorkspace before every use,
//    so cuBLAS never runs in a workspace of its own) and one activation buffer of
//    2 x max_batch_size x max_width floats (FP32: two ping-pong activations; FP16: the FP32
//    GEMM output and the FP16 copy of it that the next GEMM reads), and a stream.
// Outside the ledger: one cuBLAS handle per model and device (SharedCublas). cublasCreate sets
// up cuBLAS's default workspace pool, which the driver reports as +66 MiB per handle on an H200
// (CUDA 13.0; 2 MiB with CUBLAS_WORKSPACE_CONFIG=:0:0 in the environment); a handle per
// instance would cost that per instance. Shared, it costs it once per model and device, shows
// in the memory report as unattributed, and is released with the model. Each instance binds
// its stream and workspace to the handle under the handle's mutex while it enqueues its GEMMs
// (microseconds); the GPU work itself runs concurrently on the instances' streams.
//
// Numerics: FP32 weights: cublasGemmEx with FP32 inputs and CUBLAS_COMPUTE_32F (no TF32).
// FP16 weights: activations are rounded to FP16 before each GEMM (cuBLAS takes one input type
// for both operands), the GEMM accumulates in FP32 (CUBLAS_COMPUTE_32F, FP32 output), and bias
// and ReLU are applied in FP32. The output is FP32.
//
// Thread safety: GpuWeights changes only while its model sleeps or wakes, when no instance runs
// (SaveGpuWeights); otherwise it is only read. An instance is used by one thread at a time, and
// sets its device on the calling thread for each call (restoring the previous one).
#pragma once

#include <memory>

#include "backends/abi/backend_kit.h"
#include "backends/mlp/mlp_plan.h"

namespace vramd::backends::mlp {

struct GpuWeights {
  int device = 0;
  PackedLayout layout;  // the file's element size
  abi::Allocation buffer;
  const std::byte* at(size_t byte_offset) const {
    return static_cast<const std::byte*>(buffer.data()) + byte_offset;
  }
};

// Copies `host_image` (layout.total_bytes, packed in `layout`; pinned for the full rate) to new
// memory on `device`, charged to `owner`. The copy alone, complete on return, is recorded
// through `server`'s record_load_phase as phase "h2d" with layout.total_bytes; the device
// allocation is not part of it. ResourceExhausted when the device is full; Internal for a CUDA
// error.
Result<std::shared_ptr<GpuWeights>> UploadGpuWeights(const void* host_image,
                                                           const PackedLayout& layout, int device,
                                                           const VramdServerApi* server,
                                                           VramdOwner owner);

// The same, copied from another device's copy (cudaMemcpyPeer), so the host image need not be
// kept once one device holds the weights. Recorded as phase "d2d", not "h2d": a peer copy runs
// over NVLink or PCIe peer-to-peer at its own rate, and would make h2d's rate meaningless.
Result<std::shared_ptr<GpuWeights>> CopyGpuWeights(const GpuWeights& source, int device,
                                                         const VramdServerApi* server,
                                                         VramdOwner owner);

// A cuBLAS handle shared by the instances of one model on one device (see above).
struct SharedCublas;

// What a model keeps per device: its weights and its cuBLAS handle.
struct GpuDevice {
  std::shared_ptr<GpuWeights> weights;  // the instances read it through a const view
  std::shared_ptr<SharedCublas> blas;
};

// Creates the cuBLAS handle for `weights`' device. Internal for a CUDA or cuBLAS error.
Result<GpuDevice> MakeGpuDevice(std::shared_ptr<GpuWeights> weights);

// Sleeping (the model's Sleep and Wake, include/vramd/backend.h's model_sleep): SaveGpuWeights
// copies `weights` to `host` (layout.total_bytes; pinned for the DMA rate), complete on return.
// RestoreGpuWeights gives `weights`, whose buffer was freed, new device memory charged to
// `owner` holding `host_image`; on failure `weights` is left without memory. Neither may run
// while an instance reads the weights.
Status SaveGpuWeights(const GpuWeights& weights, void* host);
Status RestoreGpuWeights(GpuWeights& weights, const void* host_image,
                         const VramdServerApi* server, VramdOwner owner);

// A GPU instance on `device`; its memory is charged to info.owner.
Result<std::unique_ptr<MlpInstance>> CreateGpuInstance(std::shared_ptr<const MlpPlan> plan,
                                                       const GpuDevice& device,
                                                       const VramdServerApi* server,
                                                       const VramdInstanceInfo& info);

}  // namespace vramd::backends::mlp
