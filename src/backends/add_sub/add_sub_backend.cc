#include "backends/add_sub/add_sub_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/abi/backend_kit.h"

namespace vramd::backends {
namespace {

enum class Op { kAdd, kSub };

// Model-level state, fixed at load and shared read-only by every instance.
struct Plan {
  DataType datatype = DataType::kInvalid;  // kFp32 or kInt32
  struct Output {
    std::string name;
    Op op;
  };
  std::vector<Output> outputs;  // in config order
};

std::string DimsString(const google::protobuf::RepeatedField<int64_t>& dims) {
  return ShapeToString(Shape(dims.begin(), dims.end()));
}

bool SameDims(const google::protobuf::RepeatedField<int64_t>& a,
              const google::protobuf::RepeatedField<int64_t>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

Result<Plan> PlanModel(const std::string& name, const config::ModelConfig& config) {
  auto invalid = [&](const std::string& detail) {
    return Status::InvalidArgument(fmt::format(
        "model '{}': the add_sub backend cannot serve this config: {}", name, detail));
  };
  if (config.input_size() != 2) {
    return invalid(fmt::format("input: expected exactly 2 inputs (INPUT0, INPUT1), got {}",
                               config.input_size()));
  }
  const bool names_ok =
      (config.input(0).name() == "INPUT0" && config.input(1).name() == "INPUT1") ||
      (config.input(0).name() == "INPUT1" && config.input(1).name() == "INPUT0");
  if (!names_ok) {
    return invalid(fmt::format("input: expected names INPUT0 and INPUT1, got '{}' and '{}'",
                               config.input(0).name(), config.input(1).name()));
  }
  const config::DataType type = config.input(0).data_type();
  if (type != config::TYPE_FP32 && type != config::TYPE_INT32) {
    return invalid(fmt::format("input[0].data_type: expected TYPE_FP32 or TYPE_INT32, got {}",
                               config::DataType_Name(type)));
  }
  for (int i = 0; i < 2; ++i) {
    const auto& in = config.input(i);
    if (in.data_type() != type) {
      return invalid(fmt::format("input[{}].data_type: expected {} like input[0], got {}", i,
                                 config::DataType_Name(type),
                                 config::DataType_Name(in.data_type())));
    }
    if (in.optional()) {
      return invalid(fmt::format("input[{}].optional: '{}' is required by add_sub", i, in.name()));
    }
  }
  const auto& dims = config.input(0).dims();
  if (!SameDims(config.input(1).dims(), dims)) {
    return invalid(fmt::format("input[1].dims: expected {} like input[0], got {}", DimsString(dims),
                               DimsString(config.input(1).dims())));
  }
  if (config.output_size() < 1 || config.output_size() > 2) {
    return invalid(fmt::format("output: expected 1 or 2 outputs (OUTPUT0, OUTPUT1), got {}",
                               config.output_size()));
  }
  Plan plan;
  plan.datatype = static_cast<DataType>(static_cast<int>(type));
  for (int i = 0; i < config.output_size(); ++i) {
    const auto& out = config.output(i);
    Op op;
    if (out.name() == "OUTPUT0") {
      op = Op::kAdd;
    } else if (out.name() == "OUTPUT1") {
      op = Op::kSub;
    } else {
      return invalid(
          fmt::format("output[{}].name: expected OUTPUT0 or OUTPUT1, got '{}'", i, out.name()));
    }
    for (const auto& prev : plan.outputs) {
      if (prev.name == out.name()) {
        return invalid(fmt::format("output[{}].name: '{}' appears twice", i, out.name()));
      }
    }
    if (out.data_type() != type) {
      return invalid(fmt::format("output[{}].data_type: expected {} like the inputs, got {}", i,
                                 config::DataType_Name(type),
                                 config::DataType_Name(out.data_type())));
    }
    if (!SameDims(out.dims(), dims)) {
      return invalid(fmt::format("output[{}].dims: expected {} like the inputs, got {}", i,
                                 DimsString(dims), DimsString(out.dims())));
    }
    plan.outputs.push_back({out.name(), op});
  }
  return plan;
}

// Elementwise a op b over `count` 4-byte elements. Inputs may be unaligned views into a request
// body, so elements move through memcpy. INT32 is computed in uint32_t, where overflow wraps.
template <typename T>
void Compute(Op op, const std::byte* a, const std::byte* b, std::byte* out, size_t count) {
  static_assert(sizeof(T) == 4);
  for (size_t i = 0; i < count; ++i) {
    T x, y, r;
    std::memcpy(&x, a + i * 4, 4);
    std::memcpy(&y, b + i * 4, 4);
    r = op == Op::kAdd ? static_cast<T>(x + y) : static_cast<T>(x - y);
    std::memcpy(out + i * 4, &r, 4);
  }
}

class AddSubInstance {
 public:
  AddSubInstance(std::shared_ptr<const Plan> plan, std::string name)
      : plan_(std::move(plan)), name_(std::move(name)) {}

  Status Execute(const VramdRequest& request, const VramdOutputs& outputs) {
    const VramdTensor* a = abi::FindInput(request, "INPUT0");
    const VramdTensor* b = abi::FindInput(request, "INPUT1");
    if (a == nullptr || b == nullptr) {
      return Status::InvalidArgument(fmt::format("add_sub instance '{}': missing input '{}'", name_,
                                                 a == nullptr ? "INPUT0" : "INPUT1"));
    }
    for (const VramdTensor* t : {a, b}) {
      if (abi::ToDataType(t->datatype) != plan_->datatype) {
        return Status::InvalidArgument(fmt::format(
            "add_sub instance '{}': input '{}' is {}, expected {}", name_, t->name,
            DataTypeWireName(abi::ToDataType(t->datatype)), DataTypeWireName(plan_->datatype)));
      }
    }
    const Shape shape = abi::ShapeOf(*a);
    if (shape != abi::ShapeOf(*b)) {
      return Status::InvalidArgument(fmt::format(
          "add_sub: INPUT0 shape {} and INPUT1 shape {} differ; add_sub needs equal shapes",
          ShapeToString(shape), ShapeToString(abi::ShapeOf(*b))));
    }
    const int64_t count = ElementCount(shape);
    if (count < 0 || static_cast<uint64_t>(count) > a->byte_size / 4 ||
        a->byte_size != static_cast<size_t>(count) * 4 || b->byte_size != a->byte_size) {
      return Status::InvalidArgument(fmt::format(
          "add_sub: shape {} needs {} bytes per input, got {} (INPUT0) and {} (INPUT1)",
          ShapeToString(shape), count < 0 ? -1 : count * 4, a->byte_size, b->byte_size));
    }
    const auto n = static_cast<size_t>(count);
    const auto* x = static_cast<const std::byte*>(a->data);
    const auto* y = static_cast<const std::byte*>(b->data);
    for (const auto& out : plan_->outputs) {
      VRAMD_ASSIGN_OR_RETURN(std::byte * result,
                             abi::AddOutput(outputs, out.name, plan_->datatype, shape, n * 4));
      if (plan_->datatype == DataType::kInt32) {
        Compute<uint32_t>(out.op, x, y, result, n);
      } else {
        Compute<float>(out.op, x, y, result, n);
      }
    }
    return Status::Ok();
  }

 private:
  const std::shared_ptr<const Plan> plan_;
  const std::string name_;
};

class AddSubModel {
 public:
  using Instance = AddSubInstance;

  static Result<std::unique_ptr<AddSubModel>> Create(const VramdModelInfo& info) {
    VRAMD_ASSIGN_OR_RETURN(config::ModelConfig config, abi::ModelConfigOf(info));
    VRAMD_ASSIGN_OR_RETURN(Plan plan, PlanModel(info.name != nullptr ? info.name : "", config));
    return std::make_unique<AddSubModel>(std::move(plan));
  }

  explicit AddSubModel(Plan plan) : plan_(std::make_shared<const Plan>(std::move(plan))) {}

  Result<std::unique_ptr<AddSubInstance>> CreateInstance(const VramdInstanceInfo& info) {
    return std::make_unique<AddSubInstance>(plan_, info.name != nullptr ? info.name : "");
  }

 private:
  const std::shared_ptr<const Plan> plan_;
};

}  // namespace

const VramdBackendApi* AddSubBackendApi() {
  return abi::BackendApiFor<AddSubModel>("add_sub", /*supports_gpu=*/false);
}

}  // namespace vramd::backends
