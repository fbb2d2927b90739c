// Small RAII owners for the CUDA objects an mlp GPU instance holds (the current device, a
// stream, a cuBLAS handle), and CUDA / cuBLAS error codes turned into Status. Device memory is
// not here: it comes from VramdServerApi::allocate only.
//
// Every failure is an Internal Status naming the call, the error's name and its description;
// nothing aborts. Destructors ignore errors (there is no one to return them to).
//
// Thread safety: each object is used by one thread at a time.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string_view>

#include "core/status.h"

namespace vramd::backends::mlp {

Status CudaStatus(cudaError_t err, std::string_view call);
Status CublasStatus(cublasStatus_t status, std::string_view call);

// Makes `device` current for the calling thread until destroyed, then restores the previous one.
class DeviceGuard {
 public:
  DeviceGuard() = default;
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  Status Set(int device);

 private:
  int previous_ = -1;  // -1: nothing to restore
};

// A non-blocking stream (no implicit synchronization with the legacy default stream).
// Destroying it waits for its work first. Move-only.
class CudaStream {
 public:
  CudaStream() = default;
  ~CudaStream() { Reset(); }
  CudaStream(CudaStream&& other) noexcept : stream_(other.stream_) { other.stream_ = nullptr; }
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  // On the current device.
  static Result<CudaStream> Create();
  cudaStream_t get() const { return stream_; }
  void Reset();

 private:
  cudaStream_t stream_ = nullptr;
};

// A cuBLAS handle on the current device. Move-only.
class CublasHandle {
 public:
  CublasHandle() = default;
  ~CublasHandle() { Reset(); }
  CublasHandle(CublasHandle&& other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
  CublasHandle& operator=(CublasHandle&& other) noexcept;
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;

  static Result<CublasHandle> Create();
  cublasHandle_t get() const { return handle_; }
  void Reset();

 private:
  cublasHandle_t handle_ = nullptr;
};

}  // namespace vramd::backends::mlp
