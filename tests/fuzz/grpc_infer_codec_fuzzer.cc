// Fuzz target: the gRPC ModelInfer codec (server/grpc/infer_proto_codec.h). Whatever protobuf
// parses as a ModelInferRequest goes through DecodeInferRequest; what decodes is answered as an
// identity model would (its inputs sent back as outputs) through EncodeInferResponse and
// SerializeInferResponse, and the bytes gRPC would send are parsed back.
//
// Input: byte 0 bit 0: shared memory on (two system regions registered as a client would: "in",
// 256 bytes holding 0..255, and "out", 256 bytes) or off (null, as --no-grpc-shared-memory).
// The rest: the message's wire bytes.
//
// Checked beyond "no crash", against infer_proto_codec.h's promises:
//  - a refusal has a message and is InvalidArgument, Unsupported (shared memory parameters with
//    shared memory off) or NotFound (a region nobody registered);
//  - a decoded request has the message's id and one input per entry, with its name, datatype
//    and shape, holding exactly the bytes the shape needs (BYTES: elements that split into the
//    shape's count), and those bytes are the input's raw entry, its range of the region, or its
//    typed contents, element by element, in the datatype;
//  - the answer parses back as a ModelInferResponse with the id and one output per input, in
//    order, same name, datatype and shape; its raw_output_contents are the inputs' bytes, except
//    for an output the request placed in a region: an empty entry, the region named in its
//    parameters, and the region holding its bytes. Placed where they do not fit, the answer is
//    refused (InvalidArgument).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/data_type.h"
#include "core/tensor.h"
#include "fuzz_support.h"
#include "grpc_fuzz_support.h"
#include "server/grpc/infer_proto_codec.h"

namespace {
using inference::InferTensorContents;
using inference::ModelInferRequest;
using inference::ModelInferResponse;
using vramd::DataType;
using vramd::Tensor;
using vramd::fuzz::Fail;

using Regions = vramd::fuzz::ClientRegions;

// A string parameter of `p`, if it has one of that name.
template <typename Map>
const inference::InferParameter* Parameter(const Map& parameters, const std::string& key) {
  auto it = parameters.find(key);
  return it == parameters.end() ? nullptr : &it->second;
}

uint64_t AsOffset(const inference::InferParameter* p) {
  if (p == nullptr) return 0;
  return p->has_uint64_param() ? p->uint64_param() : static_cast<uint64_t>(p->int64_param());
}

// Whether `data` holds `values` as elements of type T, bit for bit after the conversion the
// decoder makes (every value in range: an out-of-range one must have been refused).
template <typename T, typename Repeated>
bool HoldsValues(std::string_view data, const Repeated& values) {
  if (data.size() != static_cast<size_t>(values.size()) * sizeof(T)) return false;
  for (int i = 0; i < values.size(); ++i) {
    const auto v = values.Get(i);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) return false;
    }
    const T expected = static_cast<T>(v);
    if (std::memcmp(data.data() + static_cast<size_t>(i) * sizeof(T), &expected, sizeof(T)) != 0) {
      return false;
    }
  }
  return true;
}

bool HoldsContents(const Tensor& t, const InferTensorContents& c) {
  const std::string_view d = t.data.view();
  switch (t.datatype) {
    case DataType::kBool: return HoldsValues<bool>(d, c.bool_contents());
    case DataType::kInt8: return HoldsValues<int8_t>(d, c.int_contents());
    case DataType::kInt16: return HoldsValues<int16_t>(d, c.int_contents());
    case DataType::kInt32: return HoldsValues<int32_t>(d, c.int_contents());
    case DataType::kInt64: return HoldsValues<int64_t>(d, c.int64_contents());
    case DataType::kUint8: return HoldsValues<uint8_t>(d, c.uint_contents());
    case DataType::kUint16: return HoldsValues<uint16_t>(d, c.uint_contents());
    case DataType::kUint32: return HoldsValues<uint32_t>(d, c.uint_contents());
    case DataType::kUint64: return HoldsValues<uint64_t>(d, c.uint64_contents());
    case DataType::kFp32: return HoldsValues<float>(d, c.fp32_contents());
    case DataType::kFp64: return HoldsValues<double>(d, c.fp64_contents());
    case DataType::kBytes: {
      auto elements = vramd::SplitBytesElements(d, t.name, -1);
      if (!elements.ok() || elements->size() != static_cast<size_t>(c.bytes_contents_size())) {
        return false;
      }
      for (int i = 0; i < c.bytes_contents_size(); ++i) {
        if ((*elements)[static_cast<size_t>(i)] != c.bytes_contents(i)) return false;
      }
      return true;
    }
    default: return false;  // FP16 and BF16 have no typed field: refused
  }
}

std::string Describe(const Tensor& t) {
  return "'" + t.name + "' (" + std::string(vramd::DataTypeWireName(t.datatype)) + " " +
         vramd::ShapeToString(t.shape) + ")";
}

// Each decoded input against its entry in the message.
void CheckDecoded(const ModelInferRequest& m, const vramd::InferRequest& request,
                  const Regions* regions) {
  if (request.id != m.id()) Fail("the id changed");
  if (request.inputs.size() != static_cast<size_t>(m.inputs_size())) Fail("an input went missing");
  int raw_index = 0;
  for (int i = 0; i < m.inputs_size(); ++i) {
    const auto& in = m.inputs(i);
    const Tensor& t = request.inputs[static_cast<size_t>(i)];
    if (t.name != in.name() || vramd::DataTypeWireName(t.datatype) != in.datatype() ||
        t.shape != vramd::Shape(in.shape().begin(), in.shape().end())) {
      Fail("input " + std::to_string(i) + " decoded as " + Describe(t));
    }
    if (t.on_gpu()) Fail("a system memory input decoded as a GPU tensor");
    const std::string_view data = t.data.view();
    if (t.datatype == DataType::kBytes) {
      if (!vramd::SplitBytesElements(data, t.name, vramd::ElementCount(t.shape)).ok()) {
        Fail("BYTES input " + Describe(t) + " does not split into its shape's elements");
      }
    } else if (vramd::FixedByteSize(t) != data.size()) {
      Fail("input " + Describe(t) + " holds " + std::to_string(data.size()) + " bytes");
    }
    if (const auto* region = Parameter(in.parameters(), "shared_memory_region")) {
      if (regions == nullptr) Fail("a shared memory input decoded with shared memory off");
      const uint64_t offset = AsOffset(Parameter(in.parameters(), "shared_memory_offset"));
      const std::byte* at = regions->Bytes(region->string_param()) + offset;
      if (reinterpret_cast<const std::byte*>(data.data()) != at && !data.empty()) {
        Fail("input " + Describe(t) + " is not read in place in its region");
      }
      continue;
    }
    if (m.raw_input_contents_size() > 0) {
      if (data != m.raw_input_contents(raw_index++)) Fail("input " + Describe(t) + ": other bytes");
    } else if (!(data.empty() && !in.has_contents()) && !HoldsContents(t, in.contents())) {
      Fail("input " + Describe(t) + " does not hold its typed contents");
    }
  }
  if (m.raw_input_contents_size() != raw_index) Fail("a raw entry was left unread");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static Regions* regions = [] {  // lives for the process, as a server's do
    vramd::fuzz::SilenceProtobuf();
    return new Regions("grpc-fuzz");
  }();
  regions->Reset();
  const Regions* shm = (data[0] & 1) != 0 ? regions : nullptr;
  auto message = std::make_shared<ModelInferRequest>();
  if (!message->ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;

  // "" is 0 (the policy's choice), anything else parses to a positive version or is refused.
  auto version = vramd::grpc_server::ParseModelVersion(message->model_version());
  if (version.ok() ? (*version < 0 || (*version == 0) != message->model_version().empty())
                   : version.status().message().empty()) {
    Fail("model version '" + message->model_version() + "' parsed wrongly");
  }
  auto decoded = vramd::grpc_server::DecodeInferRequest(message, shm ? shm->get() : nullptr);
  static const bool verbose = std::getenv("VRAMD_FUZZ_VERBOSE") != nullptr;
  if (verbose) {
    std::fprintf(stderr, "shared memory %s, %d inputs: %s\n", shm ? "on" : "off",
                 message->inputs_size(), decoded.status().ToString().c_str());
  }
  if (!decoded.ok()) {
    const auto code = decoded.status().code();
    const bool expected = code == vramd::StatusCode::kInvalidArgument ||
                          code == vramd::StatusCode::kNotFound ||
                          (code == vramd::StatusCode::kUnsupported && shm == nullptr);
    if (!expected || decoded.status().message().empty()) {
      Fail("refused with " + decoded.status().ToString());
    }
    return 0;
  }
  const vramd::InferRequest& request = *decoded;
  CheckDecoded(*message, request, shm);

  // Answered as the identity model answers: a copy of each input as an output.
  vramd::InferResponse response;
  response.id = request.id;
  response.model_name = "fuzz";
  response.model_version = 1;
  for (const Tensor& in : request.inputs) {
    Tensor out = in;
    out.data = vramd::SharedBuffer::FromString(std::string(in.data.view()));
    response.outputs.push_back(std::move(out));
  }
  vramd::grpc_server::EncodedInferResponse encoded;
  auto status = vramd::grpc_server::EncodeInferResponse(
      response, request, &encoded.message, message.get(), shm ? shm->get() : nullptr,
      &encoded.raw);
  // Where each output goes: its placement, as the request gave it (the last entry of a name).
  auto placement = [&](const std::string& name) -> const ModelInferRequest::InferRequestedOutputTensor* {
    const ModelInferRequest::InferRequestedOutputTensor* found = nullptr;
    for (const auto& o : message->outputs()) {
      if (o.name() == name && Parameter(o.parameters(), "shared_memory_region")) found = &o;
    }
    return found;
  };
  if (!status.ok()) {
    bool too_small = false;
    for (const Tensor& t : response.outputs) {
      if (const auto* o = placement(t.name)) {
        too_small = too_small ||
                    t.data.size() > AsOffset(Parameter(o->parameters(), "shared_memory_byte_size"));
      }
    }
    if (!too_small || status.code() != vramd::StatusCode::kInvalidArgument) {
      Fail("the answer was refused: " + status.ToString());
    }
    if (verbose) std::fprintf(stderr, "  answer refused: %s\n", status.ToString().c_str());
    return 0;
  }
  const ModelInferResponse back =
      vramd::fuzz::ReadBack(vramd::grpc_server::SerializeInferResponse(std::move(encoded)));
  if (back.id() != request.id) Fail("the answer's id changed");
  if (back.outputs_size() != static_cast<int>(response.outputs.size()) ||
      back.raw_output_contents_size() != back.outputs_size()) {
    Fail("the answer has " + std::to_string(back.outputs_size()) + " outputs and " +
         std::to_string(back.raw_output_contents_size()) + " raw entries for " +
         std::to_string(response.outputs.size()) + " inputs");
  }
  for (int i = 0; i < back.outputs_size(); ++i) {
    const Tensor& t = response.outputs[static_cast<size_t>(i)];
    const auto& o = back.outputs(i);
    if (o.name() != t.name || o.datatype() != vramd::DataTypeWireName(t.datatype) ||
        vramd::Shape(o.shape().begin(), o.shape().end()) != t.shape) {
      Fail("output " + std::to_string(i) + " is not input " + Describe(t));
    }
    const std::string& raw = back.raw_output_contents(i);
    const std::string_view want = t.data.view();
    const auto* placed = placement(t.name);
    if (placed == nullptr) {
      if (raw != want) Fail("output " + Describe(t) + ": other bytes");
      continue;
    }
    const auto* said = Parameter(o.parameters(), "shared_memory_region");
    const std::string& region = Parameter(placed->parameters(), "shared_memory_region")->string_param();
    if (!raw.empty() || said == nullptr || said->string_param() != region) {
      Fail("output " + Describe(t) + " placed in '" + region + "' is not answered as placed");
    }
    const uint64_t offset = AsOffset(Parameter(placed->parameters(), "shared_memory_offset"));
    if (std::memcmp(shm->Bytes(region) + offset, want.data(), want.size()) != 0) {
      Fail("output " + Describe(t) + " is not in its region");
    }
    if (verbose) std::fprintf(stderr, "  output %s written to '%s'\n", Describe(t).c_str(), region.c_str());
  }
  return 0;
}
