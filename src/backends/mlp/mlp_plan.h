// MlpPlan: what one version of an mlp model computes, decided at load from its config and its
// weights file, then shared read-only by the model and every instance.
//
// The model: y = L_{n-1}(relu(... relu(L_0(x)))), L_i(v) = v W_i^T + b_i, with W_i of shape
// [out_i, in_i] and b_i of shape [out_i], read from the safetensors tensors "layers.{i}.weight"
// and "layers.{i}.bias" (i = 0..n-1, as PyTorch names an nn.Sequential of nn.Linear). All
// tensors are F32, or all F16. in_0 is the input's width K, in_i = out_{i-1}, and out_{n-1} is
// the output's width N.
//
// Errors: InvalidArgument naming the config field, or the weights file and tensor, and what
// did not match.
//
// Thread safety: plain values and free functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "backends/mlp/safetensors.h"
#include "config/model_config.pb.h"
#include "core/status.h"
#include "vramd/backend.h"

namespace vramd::backends::mlp {

enum class WeightType { kFp32, kFp16 };

struct Layer {
  int64_t in = 0;
  int64_t out = 0;
};

struct MlpPlan {
  std::string model;  // the model's name, for messages
  std::string input_name;
  std::string output_name;
  int64_t inputs = 0;   // K: the input's only config dim
  int64_t outputs = 0;  // N: the output's only config dim
  int64_t max_batch_size = 0;
  std::filesystem::path weights_path;  // <version_dir>/<default_model_filename or model.safetensors>
  // cuBLAS's workspace per GPU instance: config parameter "cublas_workspace_mib", default
  // kDefaultCublasWorkspace. cuBLAS recommends 4 MiB before Hopper and 32 MiB on Hopper for the
  // widest choice of GEMM algorithms; an MLP's GEMMs run well with 4 MiB, and every MiB here is
  // paid once per instance.
  size_t cublas_workspace_bytes = 0;
  // Which devices the instance groups ask for: CPU for KIND_CPU / KIND_AUTO or no group at all
  // (the runtime then makes one CPU instance), GPU for KIND_GPU.
  bool needs_cpu = false;
  bool needs_gpu = false;

  // Filled from the weights file by PlanLayers.
  WeightType weight_type = WeightType::kFp32;
  std::vector<Layer> layers;
  int64_t max_width = 0;  // the widest activation: max(K, every out_i)
  uint64_t parameter_count = 0;
};

inline constexpr size_t kDefaultCublasWorkspace = size_t{4} << 20;
inline constexpr std::string_view kDefaultWeightsFile = "model.safetensors";

// The config's part of the plan for version `version_dir` of `model`: one TYPE_FP32 input of
// dims [K] and one TYPE_FP32 output of dims [N] (K, N > 0), max_batch_size >= 1, a plain file
// name in default_model_filename.
Result<MlpPlan> PlanFromConfig(const std::string& model, const config::ModelConfig& config,
                               const std::filesystem::path& version_dir);

// The weights' part: checks every tensor of `file` against the plan's K and N and fills
// weight_type, layers, max_width and parameter_count. Tensors other than the layers' are
// refused, so a gap in the numbering or a stray tensor is an error rather than ignored.
Status PlanLayers(const safetensors::File& file, MlpPlan* plan);

// Where each layer's tensors sit in a packed weights image: one buffer with every layer's
// weight, then its bias, each at a multiple of kAlignment bytes (cuBLAS and vector loads want
// aligned operands; the padding is zero).
struct PackedLayout {
  static constexpr size_t kAlignment = 256;
  size_t element_bytes = 4;  // 4: FP32, 2: FP16
  std::vector<size_t> weight_offset;  // bytes, per layer
  std::vector<size_t> bias_offset;
  size_t total_bytes = 0;
};
PackedLayout MakeLayout(const MlpPlan& plan, size_t element_bytes);

// Copies the weights of `file` into `dst` (layout.total_bytes bytes) at `layout`'s offsets:
// as they are when the element sizes match, FP16 widened to FP32 when the layout holds FP32.
// REQUIRES: PlanLayers(file, &plan) succeeded; layout = MakeLayout(plan, 4 or the file's size).
void PackWeights(const safetensors::File& file, const MlpPlan& plan, const PackedLayout& layout,
                 std::byte* dst);

// The request's input, checked: FP32, shape [B, K] with 1 <= B <= max_batch_size, B * K * 4
// bytes. InvalidArgument naming `instance` and the problem otherwise.
struct BatchInput {
  const VramdTensor* tensor = nullptr;
  int64_t batch = 0;
  VramdMemory memory{VRAMD_DEVICE_CPU, -1};  // where tensor->data is
};
Result<BatchInput> CheckRequest(const MlpPlan& plan, const VramdRequest& request,
                                std::string_view instance);

// An instance on either device (mlp_cpu.h, mlp_cuda.h), as the C ABI's execute runs it: one
// output, plan.output_name, [B, N] FP32.
class MlpInstance {
 public:
  virtual ~MlpInstance() = default;
  virtual Status Execute(const VramdRequest& request, const VramdOutputs& outputs) = 0;
};

}  // namespace vramd::backends::mlp
