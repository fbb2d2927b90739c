#include "backends/mlp/mlp_cpu.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

namespace vramd::backends::mlp {
namespace {

class CpuInstance final : public MlpInstance {
 public:
  CpuInstance(std::shared_ptr<const MlpPlan> plan, std::shared_ptr<const CpuWeights> weights,
              abi::Allocation workspace, std::string name, const VramdServerApi* server)
      : plan_(std::move(plan)),
        weights_(std::move(weights)),
        workspace_(std::move(workspace)),
        name_(std::move(name)),
        server_(server) {}

  Status Execute(const VramdRequest& request, const VramdOutputs& outputs) override {
    VRAMD_ASSIGN_OR_RETURN(BatchInput input, CheckRequest(*plan_, request, name_));
    const int batch = static_cast<int>(input.batch);
    const size_t stride = static_cast<size_t>(plan_->max_batch_size * plan_->max_width);
    float* act[2] = {static_cast<float*>(workspace_.data()),
                     static_cast<float*>(workspace_.data()) + stride};
    // The request's bytes may be unaligned (or on a GPU): the first activation is a copy.
    if (input.memory.kind == VRAMD_DEVICE_CPU || input.memory.kind == VRAMD_DEVICE_CUDA_HOST) {
      std::memcpy(act[0], input.tensor->data, input.tensor->byte_size);
    } else {
      VRAMD_RETURN_IF_ERROR(abi::Copy(server_, {VRAMD_DEVICE_CPU, -1}, act[0], input.memory,
                                      input.tensor->data, input.tensor->byte_size, nullptr));
    }
    const size_t last = plan_->layers.size() - 1;
    for (size_t i = 0; i <= last; ++i) {
      const Layer& l = plan_->layers[i];
      const int in = static_cast<int>(l.in), out = static_cast<int>(l.out);
      const float* x = act[i % 2];
      float* y = act[(i + 1) % 2];
      const float* bias = weights_->at(weights_->layout.bias_offset[i]);
      for (int r = 0; r < batch; ++r) std::memcpy(y + size_t(r) * out, bias, size_t(out) * 4);
      // y[B, out] = x[B, in] * W[out, in]^T + y (the bias).
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, out, in, 1.0f, x, in,
                  weights_->at(weights_->layout.weight_offset[i]), in, 1.0f, y, out);
      if (i != last) {
        const size_t n = size_t(batch) * out;
        for (size_t k = 0; k < n; ++k) y[k] = y[k] > 0.0f ? y[k] : 0.0f;
      }
    }
    const float* result = act[(last + 1) % 2];
    const size_t bytes = size_t(batch) * plan_->outputs * 4;
    VRAMD_ASSIGN_OR_RETURN(std::byte * out, abi::AddOutput(outputs, plan_->output_name,
                                                            DataType::kFp32,
                                                            {input.batch, plan_->outputs}, bytes));
    std::memcpy(out, result, bytes);
    return Status::Ok();
  }

 private:
  const std::shared_ptr<const MlpPlan> plan_;
  const std::shared_ptr<const CpuWeights> weights_;
  abi::Allocation workspace_;
  const std::string name_;
  const VramdServerApi* const server_;  // valid while the model is
};

}  // namespace

Result<std::shared_ptr<CpuWeights>> MakeCpuWeights(const safetensors::File& file,
                                                         const MlpPlan& plan,
                                                         const VramdServerApi* server,
                                                         VramdOwner owner) {
  auto weights = std::make_shared<CpuWeights>();
  weights->layout = MakeLayout(plan, sizeof(float));
  VRAMD_ASSIGN_OR_RETURN(weights->buffer,
                         abi::Allocation::Make(server, owner, VRAMD_DEVICE_CPU, -1,
                                               weights->layout.total_bytes));
  PackWeights(file, plan, weights->layout, static_cast<std::byte*>(weights->buffer.data()));
  return weights;
}

Result<std::unique_ptr<MlpInstance>> CreateCpuInstance(std::shared_ptr<const MlpPlan> plan,
                                                       std::shared_ptr<const CpuWeights> weights,
                                                       const VramdServerApi* server,
                                                       const VramdInstanceInfo& info) {
  const size_t bytes =
      2 * static_cast<size_t>(plan->max_batch_size * plan->max_width) * sizeof(float);
  VRAMD_ASSIGN_OR_RETURN(abi::Allocation workspace,
                         abi::Allocation::Make(server, info.owner, VRAMD_DEVICE_CPU, -1, bytes));
  return std::unique_ptr<MlpInstance>(std::make_unique<CpuInstance>(
      std::move(plan), std::move(weights), std::move(workspace),
      info.name != nullptr ? info.name : "", server));
}

}  // namespace vramd::backends::mlp
