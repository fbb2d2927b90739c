#include "backends/mlp/mlp_cuda.h"

#include <fmt/format.h>

#include <mutex>
#include <string>
#include <utility>

#include "backends/mlp/mlp_cuda_util.h"
#include "backends/mlp/mlp_kernels.h"

namespace vramd::backends::mlp {

struct SharedCublas {
  int device = 0;
  std::mutex mu;
  CublasHandle handle;  // its stream and workspace: guarded by mu
  ~SharedCublas() {
    DeviceGuard guard;
    (void)guard.Set(device);
    handle.Reset();
  }
};

namespace {

// Activation buffers start at multiples of this many elements (256 bytes as FP32), so every
// GEMM operand is as aligned as cuBLAS's fastest kernels want.
constexpr size_t kStrideAlignment = 64;

size_t ActivationStride(const MlpPlan& plan) {
  const size_t n = static_cast<size_t>(plan.max_batch_size * plan.max_width);
  return (n + kStrideAlignment - 1) / kStrideAlignment * kStrideAlignment;
}

class GpuInstance final : public MlpInstance {
 public:
  GpuInstance(std::shared_ptr<const MlpPlan> plan, GpuDevice device, std::string name)
      : plan_(std::move(plan)),
        weights_(std::move(device.weights)),
        blas_(std::move(device.blas)),
        name_(std::move(name)) {}

  ~GpuInstance() override {
    DeviceGuard guard;
    (void)guard.Set(weights_->device);
    if (stream_.get() != nullptr) {
      cudaStreamSynchronize(stream_.get());
      // Leave the shared handle bound to no stream of ours.
      std::lock_guard lock(blas_->mu);
      cudaStream_t bound = nullptr;
      if (cublasGetStream(blas_->handle.get(), &bound) == CUBLAS_STATUS_SUCCESS &&
          bound == stream_.get()) {
        cublasSetStream(blas_->handle.get(), nullptr);
      }
    }
    activations_.Reset();
    workspace_.Reset();
    stream_.Reset();
  }

  Status Init(const VramdServerApi* server, VramdOwner owner) {
    server_ = server;
    const int device = weights_->device;
    DeviceGuard guard;
    VRAMD_RETURN_IF_ERROR(guard.Set(device));
    VRAMD_ASSIGN_OR_RETURN(stream_, CudaStream::Create());
    if (plan_->cublas_workspace_bytes > 0) {
      VRAMD_ASSIGN_OR_RETURN(workspace_, abi::Allocation::Make(server, owner, VRAMD_DEVICE_GPU,
                                                               device,
                                                               plan_->cublas_workspace_bytes,
                                                               stream_.get()));
    }
    VRAMD_ASSIGN_OR_RETURN(activations_,
                           abi::Allocation::Make(server, owner, VRAMD_DEVICE_GPU, device,
                                                 2 * ActivationStride(*plan_) * sizeof(float),
                                                 stream_.get()));
    return Status::Ok();
  }

  Status Execute(const VramdRequest& request, const VramdOutputs& outputs) override {
    VRAMD_ASSIGN_OR_RETURN(BatchInput input, CheckRequest(*plan_, request, name_));
    Status status = Run(input, abi::PreferredOutputMemory(request), outputs);
    if (!status.ok()) return status.WithContext(fmt::format("mlp instance '{}'", name_));
    return status;
  }

 private:
  // The input comes from wherever it is (host, this GPU, another GPU: a client's CUDA shared
  // memory reaches here as GPU memory), and the output goes to a GPU when the consumer takes
  // it there (this instance's, or the one asked for), else to the host. Copies go through the
  // server (VramdServerApi::copy), which counts the bytes each crossing moves.
  Status Run(const BatchInput& input, VramdMemory preferred, const VramdOutputs& outputs) {
    const int device = weights_->device;
    DeviceGuard guard;
    VRAMD_RETURN_IF_ERROR(guard.Set(device));
    const cudaStream_t stream = stream_.get();
    float* act[2] = {static_cast<float*>(activations_.data()),
                     static_cast<float*>(activations_.data()) + ActivationStride(*plan_)};
    VRAMD_RETURN_IF_ERROR(abi::Copy(server_, {VRAMD_DEVICE_GPU, device}, act[0], input.memory,
                                    input.tensor->data, input.tensor->byte_size, stream));
    const float* y = nullptr;
    {
      std::lock_guard lock(blas_->mu);
      VRAMD_ASSIGN_OR_RETURN(y, EnqueueLayers(input.batch, act));
    }
    const size_t bytes = static_cast<size_t>(input.batch * plan_->outputs) * sizeof(float);
    VramdMemory where{VRAMD_DEVICE_CPU, -1};
    if (preferred.kind == VRAMD_DEVICE_GPU) {
      where = {VRAMD_DEVICE_GPU, preferred.device_id < 0 ? device : preferred.device_id};
    }
    VRAMD_ASSIGN_OR_RETURN(std::byte * result,
                           abi::AddOutputIn(outputs, where, plan_->output_name, DataType::kFp32,
                                            {input.batch, plan_->outputs}, bytes));
    // Complete on return either way: the output's buffer is the server's once execute returns.
    return abi::Copy(server_, where, result, {VRAMD_DEVICE_GPU, device}, y, bytes, stream);
  }

  // Enqueues every layer on the stream, the input being in act[0]; returns where the output
  // will be. REQUIRES: blas_->mu held (the handle is bound to this instance meanwhile).
  Result<const float*> EnqueueLayers(int64_t batch64, float* act[2]) {
    const cudaStream_t stream = stream_.get();
    cublasHandle_t handle = blas_->handle.get();
    // cublasSetStream resets the workspace to cuBLAS's own pool: set the stream first.
    VRAMD_RETURN_IF_ERROR(CublasStatus(cublasSetStream(handle, stream), "cublasSetStream"));
    VRAMD_RETURN_IF_ERROR(CublasStatus(
        cublasSetWorkspace(handle, workspace_.data(), workspace_.size()), "cublasSetWorkspace"));
    const bool fp16 = plan_->weight_type == WeightType::kFp16;
    const int batch = static_cast<int>(batch64);
    // FP16: act[0] holds the FP32 GEMM output, and act[1]'s space the FP16 activations.
    auto* half_act = reinterpret_cast<uint16_t*>(act[1]);
    if (fp16) {
      VRAMD_RETURN_IF_ERROR(CudaStatus(
          LaunchFloatToHalf(act[0], half_act, batch64 * plan_->inputs, stream),
          "FloatToHalf kernel launch"));
    }
    const cudaDataType_t type = fp16 ? CUDA_R_16F : CUDA_R_32F;
    const float one = 1.0f, zero = 0.0f;
    const size_t last = plan_->layers.size() - 1;
    float* y = act[0];
    for (size_t i = 0; i <= last; ++i) {
      const Layer& l = plan_->layers[i];
      const int in = static_cast<int>(l.in), out = static_cast<int>(l.out);
      const void* x = fp16 ? static_cast<const void*>(half_act) : act[i % 2];
      y = fp16 ? act[0] : act[(i + 1) % 2];
      // Row-major y[B, out] = x[B, in] W[out, in]^T is column-major y^T = W x^T: W's row-major
      // bytes are W^T column-major (lda = in), so op(A) = T; x^T is x's bytes (ldb = in).
      VRAMD_RETURN_IF_ERROR(CublasStatus(
          cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, out, batch, in, &one,
                       weights_->at(weights_->layout.weight_offset[i]), type, in, x, type, in,
                       &zero, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          fmt::format("cublasGemmEx (layer {}, {}x{}x{})", i, out, batch, in)));
      const bool hidden = i != last;
      VRAMD_RETURN_IF_ERROR(CudaStatus(
          LaunchBiasActivation(y, weights_->at(weights_->layout.bias_offset[i]), fp16, batch, out,
                               hidden, fp16 && hidden ? half_act : nullptr, stream),
          "BiasActivation kernel launch"));
    }
    return static_cast<const float*>(y);
  }

  const std::shared_ptr<const MlpPlan> plan_;
  const std::shared_ptr<const GpuWeights> weights_;
  const std::shared_ptr<SharedCublas> blas_;
  const std::string name_;
  const VramdServerApi* server_ = nullptr;  // valid while the model is; set by Init
  // Released explicitly, in this order reversed, by the destructor.
  CudaStream stream_;
  abi::Allocation workspace_;
  abi::Allocation activations_;
};

// Device memory for weights laid out as `layout`, on `device` (current), charged to `owner`.
Result<std::shared_ptr<GpuWeights>> AllocateGpuWeights(const PackedLayout& layout, int device,
                                                       const VramdServerApi* server,
                                                       VramdOwner owner) {
  auto weights = std::make_shared<GpuWeights>();
  weights->device = device;
  weights->layout = layout;
  VRAMD_ASSIGN_OR_RETURN(weights->buffer, abi::Allocation::Make(server, owner, VRAMD_DEVICE_GPU,
                                                                device, layout.total_bytes));
  return weights;
}

}  // namespace

Result<std::shared_ptr<GpuWeights>> UploadGpuWeights(const void* host_image,
                                                           const PackedLayout& layout, int device,
                                                           const VramdServerApi* server,
                                                           VramdOwner owner) {
  DeviceGuard guard;
  VRAMD_RETURN_IF_ERROR(guard.Set(device));
  VRAMD_ASSIGN_OR_RETURN(auto weights, AllocateGpuWeights(layout, device, server, owner));
  const std::string call = fmt::format("cudaMemcpy (weights to cuda:{})", device);
  {
    abi::LoadPhaseScope phase(server, "h2d", layout.total_bytes);
    VRAMD_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpy(weights->buffer.data(), host_image, layout.total_bytes, cudaMemcpyHostToDevice),
        call));
    // From pinned memory cudaMemcpy returns once the bytes are on the device. From pageable
    // memory (the fallback) it may return with the last chunk still in DMA, and the instances
    // read the weights from non-blocking streams that would not wait for it: wait here, inside
    // the phase, so its time is the whole copy.
    VRAMD_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(nullptr), call));
  }
  return weights;
}

Result<std::shared_ptr<GpuWeights>> CopyGpuWeights(const GpuWeights& source, int device,
                                                         const VramdServerApi* server,
                                                         VramdOwner owner) {
  DeviceGuard guard;
  VRAMD_RETURN_IF_ERROR(guard.Set(device));
  VRAMD_ASSIGN_OR_RETURN(auto weights, AllocateGpuWeights(source.layout, device, server, owner));
  // Through the server's copy: peer to peer where the GPUs allow it (access enabled once per
  // pair), else staged by the driver; counted as device-to-device bytes either way.
  abi::LoadPhaseScope phase(server, "d2d", source.layout.total_bytes);
  Status copied = abi::Copy(server, {VRAMD_DEVICE_GPU, device}, weights->buffer.data(),
                            {VRAMD_DEVICE_GPU, source.device}, source.buffer.data(),
                            source.layout.total_bytes, nullptr);
  if (!copied.ok()) {
    return copied.WithContext(
        fmt::format("copying the weights from cuda:{} to cuda:{}", source.device, device));
  }
  return weights;
}

Status SaveGpuWeights(const GpuWeights& weights, void* host) {
  DeviceGuard guard;
  VRAMD_RETURN_IF_ERROR(guard.Set(weights.device));
  const std::string call = fmt::format("cudaMemcpy (weights from cuda:{} to host)", weights.device);
  // The instances' streams are idle (the runtime runs no execution while a model sleeps), and
  // the legacy stream's copy waits for whatever the upload left on it.
  VRAMD_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(host, weights.buffer.data(),
                                              weights.layout.total_bytes, cudaMemcpyDeviceToHost),
                                   call));
  return CudaStatus(cudaStreamSynchronize(nullptr), call);
}

Status RestoreGpuWeights(GpuWeights& weights, const void* host_image,
                         const VramdServerApi* server, VramdOwner owner) {
  DeviceGuard guard;
  VRAMD_RETURN_IF_ERROR(guard.Set(weights.device));
  VRAMD_ASSIGN_OR_RETURN(abi::Allocation buffer,
                         abi::Allocation::Make(server, owner, VRAMD_DEVICE_GPU, weights.device,
                                               weights.layout.total_bytes));
  const std::string call = fmt::format("cudaMemcpy (weights to cuda:{})", weights.device);
  VRAMD_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(buffer.data(), host_image,
                                              weights.layout.total_bytes, cudaMemcpyHostToDevice),
                                   call));
  // As UploadGpuWeights: the instances read from non-blocking streams.
  VRAMD_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(nullptr), call));
  weights.buffer = std::move(buffer);
  return Status::Ok();
}

Result<GpuDevice> MakeGpuDevice(std::shared_ptr<GpuWeights> weights) {
  DeviceGuard guard;
  VRAMD_RETURN_IF_ERROR(guard.Set(weights->device));
  auto blas = std::make_shared<SharedCublas>();
  blas->device = weights->device;
  VRAMD_ASSIGN_OR_RETURN(blas->handle, CublasHandle::Create());
  return GpuDevice{std::move(weights), std::move(blas)};
}

Result<std::unique_ptr<MlpInstance>> CreateGpuInstance(std::shared_ptr<const MlpPlan> plan,
                                                       const GpuDevice& device,
                                                       const VramdServerApi* server,
                                                       const VramdInstanceInfo& info) {
  auto instance = std::make_unique<GpuInstance>(std::move(plan), device,
                                                info.name != nullptr ? info.name : "");
  VRAMD_RETURN_IF_ERROR(instance->Init(server, info.owner));
  return std::unique_ptr<MlpInstance>(std::move(instance));
}

}  // namespace vramd::backends::mlp
