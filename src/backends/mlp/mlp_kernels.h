// The mlp backend's CUDA kernels (mlp_kernels.cu), as host functions that enqueue them on a
// stream and return the launch's error (cudaSuccess, or why the launch failed). Element counts
// are int64; half-precision values are passed as their raw 16 bits.
//
// Thread safety: stateless; safe from any thread with the stream's device current.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace vramd::backends::mlp {

// For every row r < rows and column c < cols of the row-major y[rows, cols]:
//   v = y[r, c] + bias[c];  if (relu) v = max(v, 0);  y[r, c] = v;
//   and, when half_out is not null, half_out[r, c] = v rounded to FP16 (nearest even).
// `bias` is FP32, or FP16 when bias_is_half.
cudaError_t LaunchBiasActivation(float* y, const void* bias, bool bias_is_half, int64_t rows,
                                 int64_t cols, bool relu, uint16_t* half_out,
                                 cudaStream_t stream);

// out[i] = in[i] rounded to FP16 (nearest even), for i < n.
cudaError_t LaunchFloatToHalf(const float* in, uint16_t* out, int64_t n, cudaStream_t stream);

}  // namespace vramd::backends::mlp
