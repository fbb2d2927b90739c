#include "backends/mlp/mlp_cuda_util.h"

#include <fmt/format.h>

#include <utility>

namespace vramd::backends::mlp {

Status CudaStatus(cudaError_t err, std::string_view call) {
  if (err == cudaSuccess) return Status::Ok();
  cudaGetLastError();  // reset a non-sticky error, so a later launch check does not see it
  return Status::Internal(fmt::format("{} failed: {}: {}", call, cudaGetErrorName(err),
                                      cudaGetErrorString(err)));
}

Status CublasStatus(cublasStatus_t status, std::string_view call) {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Status::Internal(fmt::format("{} failed: {}: {}", call, cublasGetStatusName(status),
                                      cublasGetStatusString(status)));
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

Status DeviceGuard::Set(int device) {
  int current = 0;
  VRAMD_RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&current), "cudaGetDevice"));
  if (previous_ < 0) previous_ = current;
  if (current == device) return Status::Ok();
  return CudaStatus(cudaSetDevice(device), fmt::format("cudaSetDevice({})", device));
}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    Reset();
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

Result<CudaStream> CudaStream::Create() {
  cudaStream_t raw = nullptr;
  VRAMD_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking),
                                   "cudaStreamCreateWithFlags"));
  CudaStream s;
  s.stream_ = raw;
  return s;
}

void CudaStream::Reset() {
  if (stream_ == nullptr) return;
  cudaStreamSynchronize(stream_);
  cudaStreamDestroy(stream_);
  stream_ = nullptr;
}

CublasHandle& CublasHandle::operator=(CublasHandle&& other) noexcept {
  if (this != &other) {
    Reset();
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

Result<CublasHandle> CublasHandle::Create() {
  cublasHandle_t raw = nullptr;
  VRAMD_RETURN_IF_ERROR(CublasStatus(cublasCreate(&raw), "cublasCreate"));
  CublasHandle h;
  h.handle_ = raw;
  return h;
}

void CublasHandle::Reset() {
  if (handle_ == nullptr) return;
  cublasDestroy(handle_);
  handle_ = nullptr;
}

}  // namespace vramd::backends::mlp
