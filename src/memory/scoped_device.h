// ScopedDevice: makes a CUDA device the calling thread's current one for a scope and restores
// the previous one after, so that memory:: never changes its callers' current device. Only for
// files built with CUDA (VRAMD_WITH_CUDA).
#pragma once

#include <cuda_runtime_api.h>

namespace vramd::memory {

class ScopedDevice {
 public:
  // Skips both cudaSetDevice calls when `ordinal` is already current.
  explicit ScopedDevice(int ordinal) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ != ordinal) {
      status_ = cudaSetDevice(ordinal);
      switched_ = status_ == cudaSuccess;
    }
  }
  ~ScopedDevice() {
    if (switched_ && previous_ >= 0) cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

  // cudaSuccess unless making the device current failed.
  cudaError_t status() const { return status_; }

 private:
  int previous_ = -1;
  bool switched_ = false;
  cudaError_t status_ = cudaSuccess;
};

}  // namespace vramd::memory
