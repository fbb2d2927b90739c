// Test support for the mlp backend: weights held as floats, their safetensors tensors, and an
// independent reference (plain loops in double) the backend's outputs are checked against.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/mlp/safetensors_writer.h"
#include "core/half.h"

namespace vramd::testing {

struct MlpWeights {
  std::vector<int64_t> widths;  // K, hidden..., N
  std::vector<std::vector<float>> w, b;  // w[l] is [out, in]; FP16 models: already rounded
};

// Raw little-endian bytes of `v` as F32, or as F16 when `fp16`.
inline std::string EncodeWeights(const std::vector<float>& v, bool fp16) {
  if (!fp16) return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = HalfFromFloat(v[i]);
  return std::string(reinterpret_cast<const char*>(h.data()), h.size() * 2);
}

// The tensors of model.safetensors: layers.{i}.weight [out, in] and layers.{i}.bias [out].
inline std::vector<backends::safetensors::TensorToWrite> MlpTensors(const MlpWeights& m,
                                                                    bool fp16) {
  std::vector<backends::safetensors::TensorToWrite> t;
  const auto dtype = fp16 ? backends::safetensors::Dtype::kF16 : backends::safetensors::Dtype::kF32;
  for (size_t i = 0; i < m.w.size(); ++i) {
    t.push_back({"layers." + std::to_string(i) + ".weight", dtype,
                 {m.widths[i + 1], m.widths[i]}, EncodeWeights(m.w[i], fp16)});
    t.push_back({"layers." + std::to_string(i) + ".bias", dtype, {m.widths[i + 1]},
                 EncodeWeights(m.b[i], fp16)});
  }
  return t;
}

// y = x W^T + b per layer with three plain loops in double, ReLU between layers.
inline std::vector<float> MlpReference(const MlpWeights& m, const std::vector<float>& x,
                                       int64_t batch) {
  std::vector<double> cur(x.begin(), x.end());
  for (size_t l = 0; l < m.w.size(); ++l) {
    const int64_t in = m.widths[l], out = m.widths[l + 1];
    std::vector<double> next(batch * out);
    for (int64_t r = 0; r < batch; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        double acc = m.b[l][o];
        for (int64_t i = 0; i < in; ++i) acc += cur[r * in + i] * double(m.w[l][o * in + i]);
        next[r * out + o] = (l + 1 < m.w.size() && acc < 0) ? 0.0 : acc;
      }
    }
    cur = std::move(next);
  }
  return std::vector<float>(cur.begin(), cur.end());
}

// How RandomMlpWeights draws: He initialisation, from a normal distribution, or from a uniform
// one of the same variance (which keeps activations near 1 through many layers).
enum class MlpInit { kHeNormal, kHeUniform };

// Weights of an MLP with `widths` (K, hidden..., N), He-initialised from `seed`; biases scaled
// by `bias_scale`. With `fp16`, every value is rounded to FP16 (as a file of F16 tensors holds
// it).
inline MlpWeights RandomMlpWeights(std::vector<int64_t> widths, uint32_t seed, float bias_scale,
                                   bool fp16 = false, MlpInit init = MlpInit::kHeNormal) {
  MlpWeights m;
  m.widths = std::move(widths);
  std::mt19937 rng(seed);
  for (size_t i = 0; i + 1 < m.widths.size(); ++i) {
    const int64_t in = m.widths[i], out = m.widths[i + 1];
    const float fan_in = static_cast<float>(in);
    std::normal_distribution<float> normal(0.0f, std::sqrt(2.0f / fan_in));
    std::uniform_real_distribution<float> uniform(-std::sqrt(6.0f / fan_in),
                                                  std::sqrt(6.0f / fan_in));
    auto draw = [&] { return init == MlpInit::kHeNormal ? normal(rng) : uniform(rng); };
    std::vector<float> w(out * in), b(out);
    for (auto& v : w) v = draw();
    for (auto& v : b) v = bias_scale * draw();
    if (fp16) {
      for (auto& v : w) v = HalfToFloat(HalfFromFloat(v));
      for (auto& v : b) v = HalfToFloat(HalfFromFloat(v));
    }
    m.w.push_back(std::move(w));
    m.b.push_back(std::move(b));
  }
  return m;
}

// `batch` x `k` inputs uniform in [-1, 1), reproducible from `seed`.
inline std::vector<float> RandomMlpInput(int64_t batch, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(batch * k);
  for (auto& v : x) v = dist(rng);
  return x;
}

}  // namespace vramd::testing
