#include "server/grpc/infer_proto_codec.h"

#include <fmt/format.h>

#include <charconv>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string_view>
#include <type_traits>
#include <variant>

namespace vramd::grpc_server {
namespace {

using inference::InferParameter;
using inference::InferTensorContents;
using inference::ModelInferRequest;

Status Invalid(std::string message) { return Status::InvalidArgument(std::move(message)); }

std::string_view KindOf(const InferParameter& p) {
  switch (p.parameter_choice_case()) {
    case InferParameter::kBoolParam: return "a boolean";
    case InferParameter::kInt64Param: return "an int64";
    case InferParameter::kStringParam: return "a string";
    case InferParameter::kDoubleParam: return "a double";
    case InferParameter::kUint64Param: return "a uint64";
    case InferParameter::PARAMETER_CHOICE_NOT_SET: break;
  }
  return "no value";
}

// The parameter as a non-negative integer, if it is one.
std::optional<uint64_t> NonNegative(const InferParameter& p) {
  if (p.has_uint64_param()) return p.uint64_param();
  if (p.has_int64_param() && p.int64_param() >= 0) return static_cast<uint64_t>(p.int64_param());
  return std::nullopt;
}

Result<vramd::InferParameter> ValueOf(const std::string& key, const InferParameter& p,
                                      std::string_view what) {
  switch (p.parameter_choice_case()) {
    case InferParameter::kBoolParam: return vramd::InferParameter{key, p.bool_param()};
    case InferParameter::kInt64Param: return vramd::InferParameter{key, p.int64_param()};
    case InferParameter::kStringParam: return vramd::InferParameter{key, p.string_param()};
    case InferParameter::kDoubleParam: return vramd::InferParameter{key, p.double_param()};
    case InferParameter::kUint64Param: return vramd::InferParameter{key, p.uint64_param()};
    case InferParameter::PARAMETER_CHOICE_NOT_SET: break;
  }
  return Invalid(fmt::format("{} '{}' has no value", what, key));
}

// Protobuf maps iterate in no set order: the keys are taken sorted, so a request's parameters
// reach the model in one order whatever the client library did.
template <typename Map>
std::map<std::string, const InferParameter*> Sorted(const Map& map) {
  std::map<std::string, const InferParameter*> out;
  for (const auto& [key, value] : map) out.emplace(key, &value);
  return out;
}

bool IsSharedMemoryParameter(std::string_view key) { return key.substr(0, 14) == "shared_memory_"; }

using ShmRef = shared_memory::TensorPlacement;

// The tensor's shared_memory_* parameters, if it has any: region (a string) and byte_size are
// needed, offset defaults to 0; `what` names the tensor in errors.
template <typename Map>
Result<std::optional<ShmRef>> ReadShmParameters(const Map& parameters, const std::string& what,
                                                const shared_memory::SharedMemoryRegions* shm) {
  std::optional<ShmRef> ref;
  bool has_size = false;
  for (const auto& [key, p] : parameters) {
    if (!IsSharedMemoryParameter(key)) continue;
    if (shm == nullptr) {
      return Status::Unsupported(fmt::format(
          "{}: shared memory (parameter '{}') is turned off on this server "
          "(--no-grpc-shared-memory); send the tensor in the request",
          what, key));
    }
    if (!ref) ref.emplace();
    if (key == "shared_memory_region") {
      if (!p.has_string_param()) {
        return Invalid(fmt::format("{}: parameter 'shared_memory_region' must be a string, got {}",
                                   what, KindOf(p)));
      }
      ref->region = p.string_param();
    } else if (key == "shared_memory_offset" || key == "shared_memory_byte_size") {
      auto v = NonNegative(p);
      if (!v) {
        return Invalid(fmt::format("{}: parameter '{}' must be a non-negative integer, got {}",
                                   what, key, KindOf(p)));
      }
      if (key == "shared_memory_offset") {
        ref->offset = *v;
      } else {
        ref->byte_size = *v;
        has_size = true;
      }
    } else {
      return Invalid(fmt::format("{}: unknown shared memory parameter '{}'", what, key));
    }
  }
  if (ref && (ref->region.empty() || !has_size)) {
    return Invalid(fmt::format(
        "{}: shared memory needs parameters 'shared_memory_region' and 'shared_memory_byte_size'",
        what));
  }
  return ref;
}

Status ReadRequestParameters(const ModelInferRequest& m, InferRequest* request) {
  for (const auto& entry : Sorted(m.parameters())) {
    const std::string& key = entry.first;  // a plain reference: lambdas below capture it
    const InferParameter& p = *entry.second;
    auto must_be_bool = [&](bool* out) -> Status {
      if (!p.has_bool_param()) {
        return Invalid(fmt::format("request parameter '{}' must be true or false, got {}", key,
                                   KindOf(p)));
      }
      *out = p.bool_param();
      return Status::Ok();
    };
    auto must_be_uint = [&](std::string_view unit, uint64_t* out) -> Status {
      auto v = NonNegative(p);
      if (!v) {
        return Invalid(fmt::format("request parameter '{}' must be a non-negative integer{}, got {}",
                                   key, unit, KindOf(p)));
      }
      *out = *v;
      return Status::Ok();
    };
    if (key == "timeout") {
      VRAMD_RETURN_IF_ERROR(must_be_uint(" (microseconds)", &request->timeout_us));
    } else if (key == "priority") {
      uint64_t priority = 0;  // checked as Triton checks it, then dropped: one priority level
      VRAMD_RETURN_IF_ERROR(must_be_uint("", &priority));
    } else if (key == "sequence_id") {
      if (auto v = NonNegative(p)) {
        request->correlation_id = *v;
        request->correlation_id_string.clear();
      } else if (p.has_string_param()) {
        request->correlation_id = 0;
        request->correlation_id_string = p.string_param();
      } else {
        return Invalid(fmt::format(
            "request parameter 'sequence_id' must be a non-negative integer or a string, got {}",
            KindOf(p)));
      }
    } else if (key == "sequence_start" || key == "sequence_end") {
      bool set = false;
      VRAMD_RETURN_IF_ERROR(must_be_bool(&set));
      const uint32_t flag =
          key == "sequence_start" ? kRequestFlagSequenceStart : kRequestFlagSequenceEnd;
      request->flags = set ? (request->flags | flag) : (request->flags & ~flag);
    } else if (key == "binary_data_output" || key == "triton_enable_empty_final_response") {
      // HTTP's binary tensor extension (gRPC outputs are always raw); the stream's final
      // response switch, read by the stream (grpc_routes.h).
    } else if (std::string_view(key).substr(0, 7) == "triton_") {
      return Invalid(fmt::format(
          "request parameter '{}': keys starting with 'triton_' are reserved for Triton usage "
          "and should not be specified",
          key));
    } else {
      VRAMD_ASSIGN_OR_RETURN(vramd::InferParameter parameter, ValueOf(key, p, "request parameter"));
      request->parameters.push_back(std::move(parameter));
    }
  }
  return Status::Ok();
}

// Copies `values` into `out` as elements of type T, each checked against T's range.
template <typename T, typename Repeated>
Status PackValues(const Repeated& values, const std::string& name, std::string* out) {
  out->resize(static_cast<size_t>(values.size()) * sizeof(T));
  for (int i = 0; i < values.size(); ++i) {
    const auto v = values.Get(i);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) {
        return Invalid(fmt::format("input '{}': element {} ({}) is out of range of its datatype",
                                   name, i, v));
      }
    }
    const T element = static_cast<T>(v);
    std::memcpy(out->data() + static_cast<size_t>(i) * sizeof(T), &element, sizeof(T));
  }
  return Status::Ok();
}

// The typed contents of `tensor`'s datatype as its bytes; the other fields must be empty.
Result<std::string> PackContents(const InferTensorContents& c, const Tensor& tensor) {
  const std::string& n = tensor.name;
  std::string bytes;
  int count = 0;
  const int total = c.bool_contents_size() + c.int_contents_size() + c.int64_contents_size() +
                    c.uint_contents_size() + c.uint64_contents_size() + c.fp32_contents_size() +
                    c.fp64_contents_size() + c.bytes_contents_size();
  switch (tensor.datatype) {
    case DataType::kBool:
      count = c.bool_contents_size();
      VRAMD_RETURN_IF_ERROR(PackValues<bool>(c.bool_contents(), n, &bytes));
      break;
    case DataType::kInt8:
      count = c.int_contents_size();
      VRAMD_RETURN_IF_ERROR(PackValues<int8_t>(c.int_contents(), n, &bytes));
      break;
    case DataType::kInt16:
      count = c.int_contents_size();
      VRAMD_RETURN_IF_ERROR(PackValues<int16_t>(c.int_contents(), n, &bytes));
      break;
    case DataType::kInt32:
      count = c.int_contents_size();
      VRAMD_RETURN_IF_ERROR(PackValues<int32_t>(c.int_contents(), n, &bytes));
      break;
    case DataType::kInt64:
      count = c.int64_contents_size();
      VRAMD_RETURN_IF_ERROR(PackValues<int64_t>(c.int64_contents(), n, &bytes));
      break;
    case DataType::kUint8:
      count = c.uint_contents_size();
      VRAMD_RETURN_IF_ERROR(PackValues<uint8_t>(c.uint_contents(), n, &bytes));
      break;
    case DataType::kUint16:
      count = c.uint_contents_size();
      VRAMD_RETURN_IF_ERROR(PackValues<uint16_t>(c.uint_contents(), n, &bytes));
      break;
    case DataType::kUint32:
      count = c.uint_contents_size();
      VRAMD_RETURN_IF_ERROR(PackValues<uint32_t>(c.uint_contents(), n, &bytes));
      break;
    case DataType::kUint64:
      count = c.uint64_contents_size();
      VRAMD_RETURN_IF_ERROR(PackValues<uint64_t>(c.uint64_contents(), n, &bytes));
      break;
    case DataType::kFp32:
      count = c.fp32_contents_size();
      VRAMD_RETURN_IF_ERROR(PackValues<float>(c.fp32_contents(), n, &bytes));
      break;
    case DataType::kFp64:
      count = c.fp64_contents_size();
      VRAMD_RETURN_IF_ERROR(PackValues<double>(c.fp64_contents(), n, &bytes));
      break;
    case DataType::kBytes:
      count = c.bytes_contents_size();
      for (const std::string& element : c.bytes_contents()) AppendBytesElement(&bytes, element);
      break;
    case DataType::kFp16:
    case DataType::kBf16:
      return Invalid(fmt::format(
          "input '{}': {} has no typed contents field; send it in raw_input_contents", n,
          DataTypeWireName(tensor.datatype)));
    case DataType::kInvalid: break;
  }
  if (total != count) {
    return Invalid(fmt::format(
        "input '{}': its contents are in a field other than the one of datatype {}", n,
        DataTypeWireName(tensor.datatype)));
  }
  if (count != ElementCount(tensor.shape)) {
    return Invalid(fmt::format("input '{}': {} elements in its contents, but shape {} has {}", n,
                               count, ShapeToString(tensor.shape), ElementCount(tensor.shape)));
  }
  return bytes;
}

Status ReadInput(const ModelInferRequest::InferInputTensor& in, size_t position, Tensor* tensor) {
  if (in.name().empty()) return Invalid(fmt::format("inputs[{}]: 'name' must not be empty", position));
  tensor->name = in.name();
  const std::string& n = tensor->name;
  for (int i = 0; i < in.shape_size(); ++i) {
    if (in.shape(i) < 0) {
      return Invalid(fmt::format("input '{}': shape[{}] must be a non-negative integer, got {}", n,
                                 i, in.shape(i)));
    }
    tensor->shape.push_back(in.shape(i));
  }
  const std::optional<DataType> type = DataTypeFromWireName(in.datatype());
  if (!type) {
    return Invalid(fmt::format(
        "input '{}': unknown datatype '{}' (expected BOOL, UINT8..UINT64, INT8..INT64, FP16, "
        "BF16, FP32, FP64 or BYTES)",
        n, in.datatype()));
  }
  tensor->datatype = *type;
  return Status::Ok();
}

}  // namespace

Result<int64_t> ParseModelVersion(const std::string& text) {
  if (text.empty()) return int64_t{0};
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v <= 0) {
    return Invalid(fmt::format("model version '{}' is not a positive integer", text));
  }
  return v;
}

Result<InferRequest> DecodeInferRequest(std::shared_ptr<const ModelInferRequest> message,
                                        const shared_memory::SharedMemoryRegions* shm) {
  const ModelInferRequest& m = *message;
  InferRequest request;
  request.id = m.id();
  VRAMD_RETURN_IF_ERROR(ReadRequestParameters(m, &request));
  // Inputs in shared memory have no raw entry: raw_input_contents holds the others', in order.
  std::vector<std::optional<ShmRef>> in_shm(static_cast<size_t>(m.inputs_size()));
  int in_request = 0;
  for (int i = 0; i < m.inputs_size(); ++i) {
    VRAMD_ASSIGN_OR_RETURN(in_shm[static_cast<size_t>(i)],
                           ReadShmParameters(m.inputs(i).parameters(),
                                             fmt::format("input '{}'", m.inputs(i).name()), shm));
    if (!in_shm[static_cast<size_t>(i)]) ++in_request;
  }
  const bool raw = m.raw_input_contents_size() > 0;
  if (raw && m.raw_input_contents_size() != in_request) {
    return Invalid(fmt::format(
        "raw_input_contents has {} entries but the request has {} inputs; send one per input, "
        "in the order of 'inputs'",
        m.raw_input_contents_size(), in_request));
  }
  request.inputs.resize(static_cast<size_t>(m.inputs_size()));
  int raw_index = 0;
  for (int i = 0; i < m.inputs_size(); ++i) {
    const auto& in = m.inputs(i);
    Tensor& tensor = request.inputs[static_cast<size_t>(i)];
    VRAMD_RETURN_IF_ERROR(ReadInput(in, static_cast<size_t>(i), &tensor));
    if (const auto& ref = in_shm[static_cast<size_t>(i)]) {
      if (in.has_contents()) {
        return Invalid(fmt::format(
            "input '{}' has 'contents' and shared memory parameters; send one form", tensor.name));
      }
      VRAMD_RETURN_IF_ERROR(shared_memory::AttachInput(*shm, *ref, &tensor));
      continue;
    }
    if (raw) {
      if (in.has_contents()) {
        return Invalid(fmt::format(
            "input '{}' has 'contents' while the request uses raw_input_contents; send one form",
            tensor.name));
      }
      const std::string& bytes = m.raw_input_contents(raw_index++);
      if (tensor.datatype == DataType::kBytes) {
        VRAMD_RETURN_IF_ERROR(
            SplitBytesElements(bytes, tensor.name, ElementCount(tensor.shape)).status());
      } else if (const auto needed = FixedByteSize(tensor); needed != bytes.size()) {
        return Invalid(fmt::format(
            "input '{}': raw_input_contents has {} bytes but shape {} of {} needs {}", tensor.name,
            bytes.size(), ShapeToString(tensor.shape), DataTypeWireName(tensor.datatype),
            needed ? fmt::format("{}", *needed) : std::string("more than 2^64")));
      }
      tensor.data = SharedBuffer::View(message, reinterpret_cast<const std::byte*>(bytes.data()),
                                       bytes.size());
    } else {
      if (!in.has_contents() && ElementCount(tensor.shape) != 0) {
        return Invalid(fmt::format(
            "input '{}' has no data: give its 'contents' or send raw_input_contents",
            tensor.name));
      }
      VRAMD_ASSIGN_OR_RETURN(std::string bytes, PackContents(in.contents(), tensor));
      tensor.data = SharedBuffer::FromString(std::move(bytes));
    }
  }
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (request.inputs[j].name == request.inputs[i].name) {
        return Invalid(fmt::format("input '{}' appears more than once", request.inputs[i].name));
      }
    }
  }
  // Outputs placed in shared memory, which a backend may write there directly.
  auto placed = std::make_shared<std::vector<ShmRef>>();
  for (const auto& out : m.outputs()) {
    if (out.name().empty()) return Invalid("a requested output has an empty 'name'");
    RequestedOutput requested;
    requested.name = out.name();
    requested.binary = true;
    const std::string what = fmt::format("output '{}'", out.name());
    VRAMD_ASSIGN_OR_RETURN(auto out_shm, ReadShmParameters(out.parameters(), what, shm));
    if (out_shm) {  // the region and range must exist now; the output is written at the end
      VRAMD_ASSIGN_OR_RETURN(auto slice, shm->Find(out_shm->region, out_shm->offset,
                                                   out_shm->byte_size, what));
      // Copied into a CUDA region from the GPU the model leaves it on, not through the host.
      if (slice.gpu != kOnHost) request.output_gpu = kAnyGpu;
      out_shm->tensor = out.name();
      placed->push_back(std::move(*out_shm));
    }
    for (const auto& [key, p] : out.parameters()) {
      if (key != "classification") continue;
      auto v = NonNegative(p);
      if (!v || *v == 0 || *v > std::numeric_limits<uint32_t>::max()) {
        return Invalid(fmt::format(
            "output '{}': parameter 'classification' must be a positive integer, got {}",
            out.name(), KindOf(p)));
      }
      requested.classification = static_cast<uint32_t>(*v);
    }
    for (const RequestedOutput& earlier : request.outputs) {
      if (earlier.name == requested.name) {
        return Invalid(fmt::format("output '{}' is requested more than once", requested.name));
      }
    }
    request.outputs.push_back(std::move(requested));
  }
  request.binary_data_output = true;
  if (!placed->empty()) {
    request.output_buffer = shared_memory::PlacedOutputBuffers(shm, placed, request.inputs);
  }
  return request;
}

Status EncodeInferResponse(const InferResponse& response, const InferRequest& request,
                           inference::ModelInferResponse* out,
                           const inference::ModelInferRequest* message,
                           const shared_memory::SharedMemoryRegions* shm,
                           std::vector<SharedBuffer>* raw) {
  out->Clear();
  if (raw != nullptr) raw->clear();
  out->set_model_name(response.model_name);
  out->set_model_version(std::to_string(response.model_version));
  out->set_id(request.id);
  for (const vramd::InferParameter& p : response.parameters) {
    InferParameter& value = (*out->mutable_parameters())[p.name];
    std::visit(
        [&value](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, bool>) value.set_bool_param(v);
          else if constexpr (std::is_same_v<T, int64_t>) value.set_int64_param(v);
          else if constexpr (std::is_same_v<T, uint64_t>) value.set_uint64_param(v);
          else if constexpr (std::is_same_v<T, double>) value.set_double_param(v);
          else value.set_string_param(v);
        },
        p.value);
  }
  // Where the client placed outputs, and the outputs that are not placed there brought to
  // the host (a GPU one is copied into its CUDA region from where it is).
  std::vector<ShmRef> placed;
  if (message != nullptr) {
    for (const auto& requested : message->outputs()) {
      VRAMD_ASSIGN_OR_RETURN(auto ref, ReadShmParameters(requested.parameters(),
                                                         fmt::format("output '{}'", requested.name()),
                                                         shm));
      if (!ref) continue;
      ref->tensor = requested.name();
      placed.push_back(std::move(*ref));
    }
  }
  std::vector<Tensor> hosted;
  VRAMD_ASSIGN_OR_RETURN(const std::vector<Tensor>* outputs,
                         shared_memory::OutputsToEncode(response.outputs, &placed, &hosted));
  for (const Tensor& t : *outputs) {
    auto* o = out->add_outputs();
    o->set_name(t.name);
    o->set_datatype(std::string(DataTypeWireName(t.datatype)));
    for (int64_t d : t.shape) o->add_shape(d);
    const ShmRef* ref = shared_memory::PlacementOf(&placed, t.name);
    if (ref == nullptr) {
      if (raw != nullptr) {
        raw->push_back(t.data);
      } else {
        const std::string_view bytes = t.data.view();
        out->add_raw_output_contents()->assign(bytes.data(), bytes.size());
      }
      continue;
    }
    // Written into the client's region; the response says where, and carries no bytes of it
    // (an empty raw entry keeps the others at their outputs' positions).
    VRAMD_RETURN_IF_ERROR(shm->Write(*ref, t, fmt::format("output '{}'", t.name)));
    auto& parameters = *o->mutable_parameters();
    parameters["shared_memory_region"].set_string_param(ref->region);
    parameters["shared_memory_byte_size"].set_int64_param(static_cast<int64_t>(t.data.size()));
    if (ref->offset != 0) parameters["shared_memory_offset"].set_int64_param(static_cast<int64_t>(ref->offset));
    if (raw != nullptr) {
      raw->emplace_back();
    } else {
      out->add_raw_output_contents();
    }
  }
  return Status::Ok();
}

namespace {

constexpr uint8_t kRawOutputTag = (6 << 3) | 2;  // raw_output_contents, length-delimited

void AppendVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// What the in-place slices hold: released once gRPC has let go of the last of them, the
// outputs before the outcome that keeps their owner (EncodedInferResponse's order).
struct HeldOutputs {
  std::shared_ptr<const void> keep;
  std::vector<SharedBuffer> raw;
};

void ReleaseHeld(void* held) {
  std::unique_ptr<std::shared_ptr<HeldOutputs>> gone(static_cast<std::shared_ptr<HeldOutputs>*>(held));
}

}  // namespace

grpc::ByteBuffer SerializeInferResponse(EncodedInferResponse response) {
  std::string head;
  response.message.SerializeToString(&head);
  std::vector<grpc::Slice> slices;
  // Made with the first entry sent in place: most answers (small outputs) need none.
  std::shared_ptr<HeldOutputs> held;
  for (const SharedBuffer& entry : response.raw) {
    head.push_back(static_cast<char>(kRawOutputTag));
    AppendVarint(entry.size(), &head);
    if (entry.size() < kRawInPlaceBytes) {
      head.append(entry.view());
      continue;
    }
    slices.emplace_back(head);
    head.clear();
    if (held == nullptr) held = std::make_shared<HeldOutputs>();
    auto ref = std::make_unique<std::shared_ptr<HeldOutputs>>(held);
    slices.emplace_back(const_cast<std::byte*>(entry.data()), entry.size(), &ReleaseHeld,
                        ref.release());
  }
  if (!head.empty() || slices.empty()) slices.emplace_back(head);
  if (held != nullptr) {
    held->keep = std::move(response.keep);
    held->raw = std::move(response.raw);
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace vramd::grpc_server
