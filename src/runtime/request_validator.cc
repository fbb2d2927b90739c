// Request validation: every check a backend may rely on, each failing with a message that names
// the tensor, what the config expects and what the client sent.
//
// Inputs are checked in the order the client sent them (known name, not repeated, datatype,
// shape, byte size), then the config is walked for missing required inputs, then requested
// outputs. The first failure is returned. Besides the header's list, inputs of a batching model
// must agree on the batch size (Triton rejects a mix too), so backends can index by batch.
//
// A config input's `reshape` is what the backend sees, not what the client sends, so shapes are
// checked against `dims` only.
#include "runtime/request_validator.h"

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <unordered_set>

namespace vramd::runtime {
namespace {

// config::DataType and vramd::DataType share Triton's numbering, so a static_cast converts.
constexpr bool ConfigTypesMatchCoreTypes() {
  return static_cast<int>(config::TYPE_INVALID) == static_cast<int>(DataType::kInvalid) &&
         static_cast<int>(config::TYPE_BOOL) == static_cast<int>(DataType::kBool) &&
         static_cast<int>(config::TYPE_UINT8) == static_cast<int>(DataType::kUint8) &&
         static_cast<int>(config::TYPE_UINT16) == static_cast<int>(DataType::kUint16) &&
         static_cast<int>(config::TYPE_UINT32) == static_cast<int>(DataType::kUint32) &&
         static_cast<int>(config::TYPE_UINT64) == static_cast<int>(DataType::kUint64) &&
         static_cast<int>(config::TYPE_INT8) == static_cast<int>(DataType::kInt8) &&
         static_cast<int>(config::TYPE_INT16) == static_cast<int>(DataType::kInt16) &&
         static_cast<int>(config::TYPE_INT32) == static_cast<int>(DataType::kInt32) &&
         static_cast<int>(config::TYPE_INT64) == static_cast<int>(DataType::kInt64) &&
         static_cast<int>(config::TYPE_FP16) == static_cast<int>(DataType::kFp16) &&
         static_cast<int>(config::TYPE_FP32) == static_cast<int>(DataType::kFp32) &&
         static_cast<int>(config::TYPE_FP64) == static_cast<int>(DataType::kFp64) &&
         static_cast<int>(config::TYPE_STRING) == static_cast<int>(DataType::kBytes) &&
         static_cast<int>(config::TYPE_BF16) == static_cast<int>(DataType::kBf16);
}
static_assert(ConfigTypesMatchCoreTypes(),
              "config::DataType and vramd::DataType must keep Triton's numbering");

DataType CoreType(config::DataType t) { return static_cast<DataType>(static_cast<int>(t)); }

std::string ModelName(const config::ModelConfig& config, const InferRequest& request) {
  return config.name().empty() ? request.model_name : config.name();
}

template <typename Tensors>
std::string JoinNames(const Tensors& tensors) {
  std::string out;
  for (const auto& t : tensors) {
    if (!out.empty()) out += ", ";
    out += t.name();
  }
  return out.empty() ? "none" : out;
}


Status CheckDatatype(const config::ModelInput& in, const Tensor& t) {
  const DataType expected = CoreType(in.data_type());
  if (t.datatype == expected) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "input '{}': expected datatype {} (config {}), got {}", t.name, DataTypeWireName(expected),
      DataTypeConfigName(expected), DataTypeWireName(t.datatype)));
}

// The shape check. `batch_size` receives the leading dimension when max_batch_size > 0.
Status CheckShape(const config::ModelInput& in, const Tensor& t, int32_t max_batch_size,
                  std::optional<int64_t>* batch_size) {
  const Shape dims(in.dims().begin(), in.dims().end());
  const bool batching = max_batch_size > 0;
  auto mismatch = [&](const std::string& detail) {
    std::string with_batch =
        batching ? fmt::format(" with max_batch_size {}", max_batch_size) : std::string();
    return Status::InvalidArgument(fmt::format("input '{}': shape {} does not match dims {}{}: {}",
                                               t.name, ShapeToString(t.shape), ShapeToString(dims),
                                               with_batch, detail));
  };

  const size_t offset = batching ? 1 : 0;
  const size_t want_rank = dims.size() + offset;
  if (t.shape.size() != want_rank) {
    return mismatch(fmt::format("expected {} dimension(s){}, got {}", want_rank,
                                batching ? " (batch + dims)" : "", t.shape.size()));
  }
  if (batching) {
    const int64_t batch = t.shape[0];
    if (batch < 1) {
      return Status::InvalidArgument(
          fmt::format("input '{}': batch size {} is below 1 (shape {}, max_batch_size {})", t.name,
                      batch, ShapeToString(t.shape), max_batch_size));
    }
    if (batch > max_batch_size) {
      return Status::InvalidArgument(fmt::format(
          "input '{}': batch size {} exceeds max_batch_size {}", t.name, batch, max_batch_size));
    }
    *batch_size = batch;
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    const size_t at = i + offset;
    const int64_t got = t.shape[at];
    if (dims[i] < 0) {
      if (got < 0)
        return mismatch(fmt::format("dimension {} is {}, expected a size >= 0", at, got));
    } else if (got != dims[i]) {
      return mismatch(fmt::format("dimension {} is {}, expected {}", at, got, dims[i]));
    }
  }
  return Status::Ok();
}

// REQUIRES: every dimension of t.shape is >= 0 (CheckShape passed).
Status CheckByteSize(const Tensor& t) {
  const int64_t count = ElementCount(t.shape);
  const size_t got = t.data.size();
  if (t.datatype == DataType::kBytes) {
    // Each element takes at least its 4-byte length prefix; checking this first also keeps a
    // huge declared shape from sizing anything before the data is read.
    if (static_cast<uint64_t>(count) > got / 4) {
      return Status::InvalidArgument(
          fmt::format("input '{}': shape {} has {} BYTES element(s), needing at least {} bytes of "
                      "length prefixes, got {} bytes",
                      t.name, ShapeToString(t.shape), count,
                      count > std::numeric_limits<int64_t>::max() / 4 ? std::string("2^63")
                                                                      : std::to_string(count * 4),
                      got));
    }
    auto elements = SplitBytesElements(t.data.view(), t.name, count);
    return elements.ok() ? Status::Ok() : elements.status();
  }
  const auto elem = static_cast<int64_t>(DataTypeByteSize(t.datatype));
  if (elem == 0) {
    return Status::InvalidArgument(fmt::format("input '{}': datatype {} has no element size",
                                               t.name, DataTypeWireName(t.datatype)));
  }
  if (count > std::numeric_limits<int64_t>::max() / elem) {
    return Status::InvalidArgument(
        fmt::format("input '{}': byte size {} does not match shape {} of {} (over 2^63 bytes)",
                    t.name, got, ShapeToString(t.shape), DataTypeWireName(t.datatype)));
  }
  const int64_t want = count * elem;
  if (static_cast<uint64_t>(want) == got) return Status::Ok();
  return Status::InvalidArgument(
      fmt::format("input '{}': byte size {} does not match shape {} of {} ({} bytes)", t.name, got,
                  ShapeToString(t.shape), DataTypeWireName(t.datatype), want));
}

Status CheckOutputs(const config::ModelConfig& config, const InferRequest& request) {
  std::unordered_set<std::string> seen;
  for (const auto& out : request.outputs) {
    bool known = false;
    for (const auto& c : config.output()) known = known || c.name() == out.name;
    if (!known) {
      return Status::InvalidArgument(
          fmt::format("unexpected output '{}' requested from model '{}' (outputs: {})", out.name,
                      ModelName(config, request), JoinNames(config.output())));
    }
    if (!seen.insert(out.name).second) {
      return Status::InvalidArgument(
          fmt::format("output '{}' is requested more than once", out.name));
    }
  }
  return Status::Ok();
}

}  // namespace

Status ValidateInferRequest(const config::ModelConfig& config, const InferRequest& request) {
  std::unordered_set<std::string> seen;
  std::optional<int64_t> first_batch;
  std::string first_batch_input;
  for (const Tensor& t : request.inputs) {
    const config::ModelInput* in = FindConfigInput(config, t.name);
    if (in == nullptr) {
      return Status::InvalidArgument(
          fmt::format("unexpected input '{}' for model '{}' (inputs: {})", t.name,
                      ModelName(config, request), JoinNames(config.input())));
    }
    if (!seen.insert(t.name).second) {
      return Status::InvalidArgument(fmt::format("input '{}' is sent more than once", t.name));
    }
    VRAMD_RETURN_IF_ERROR(CheckDatatype(*in, t));
    std::optional<int64_t> batch;
    VRAMD_RETURN_IF_ERROR(CheckShape(*in, t, config.max_batch_size(), &batch));
    if (batch.has_value()) {
      if (!first_batch.has_value()) {
        first_batch = batch;
        first_batch_input = t.name;
      } else if (*batch != *first_batch) {
        return Status::InvalidArgument(
            fmt::format("input '{}': batch size {} differs from batch size {} of input '{}'",
                        t.name, *batch, *first_batch, first_batch_input));
      }
    }
    VRAMD_RETURN_IF_ERROR(CheckByteSize(t));
  }
  for (const auto& in : config.input()) {
    if (!in.optional() && seen.count(in.name()) == 0) {
      return Status::InvalidArgument(fmt::format("missing required input '{}'", in.name()));
    }
  }
  return CheckOutputs(config, request);
}

const config::ModelInput* FindConfigInput(const config::ModelConfig& config,
                                          const std::string& name) {
  for (const auto& in : config.input())
    if (in.name() == name) return &in;
  return nullptr;
}

std::string ConfigInputNames(const config::ModelConfig& config) { return JoinNames(config.input()); }

}  // namespace vramd::runtime
