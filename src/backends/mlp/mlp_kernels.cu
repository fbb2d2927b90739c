#include "backends/mlp/mlp_kernels.h"

#include <cuda_fp16.h>

namespace vramd::backends::mlp {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // grid-stride loops cover the rest

int Blocks(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

__device__ float LoadBias(const float* bias, int64_t c) { return bias[c]; }
__device__ float LoadBias(const __half* bias, int64_t c) { return __half2float(bias[c]); }

template <typename Bias>
__global__ void BiasActivation(float* y, const Bias* bias, int64_t rows, int64_t cols, bool relu,
                               __half* half_out) {
  const int64_t n = rows * cols;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    float v = y[i] + LoadBias(bias, i % cols);
    if (relu) v = v > 0.0f ? v : 0.0f;
    y[i] = v;
    if (half_out != nullptr) half_out[i] = __float2half_rn(v);
  }
}

__global__ void FloatToHalf(const float* in, __half* out, int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    out[i] = __float2half_rn(in[i]);
  }
}

}  // namespace

cudaError_t LaunchBiasActivation(float* y, const void* bias, bool bias_is_half, int64_t rows,
                                 int64_t cols, bool relu, uint16_t* half_out,
                                 cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n <= 0) return cudaSuccess;
  auto* h = reinterpret_cast<__half*>(half_out);
  if (bias_is_half) {
    BiasActivation<<<Blocks(n), kThreads, 0, stream>>>(y, static_cast<const __half*>(bias), rows,
                                                       cols, relu, h);
  } else {
    BiasActivation<<<Blocks(n), kThreads, 0, stream>>>(y, static_cast<const float*>(bias), rows,
                                                       cols, relu, h);
  }
  return cudaGetLastError();
}

cudaError_t LaunchFloatToHalf(const float* in, uint16_t* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  FloatToHalf<<<Blocks(n), kThreads, 0, stream>>>(in, reinterpret_cast<__half*>(out), n);
  return cudaGetLastError();
}

}  // namespace vramd::backends::mlp
