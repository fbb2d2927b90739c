// Fuzz target: ParseInferRequest (JSON and binary tensor data) and, on what parses, the
// response encoder, with the parsed inputs sent back as outputs (what an identity model does).
//
// Input: byte 0's low bit says whether the body comes with Inference-Header-Content-Length;
// if so, bytes 1-2 (little-endian) are its value, which may be 0 or exceed the body. The rest
// is the body.
//
// Checked beyond "no crash", against infer_codec.h's promises:
//  - the encoder refuses (InvalidArgument) exactly when a BYTES output to be written as JSON
//    has an element that is not UTF-8;
//  - otherwise the body is valid JSON up to json_length, followed by exactly the binary
//    outputs' bytes;
//  - and it reads back: its "outputs" renamed "inputs" is a request, which must parse to the
//    same tensors (name, datatype, shape, bytes) and id, except where the JSON form is
//    documented as inexact: Inf/NaN become null, names and ids that are not UTF-8 are
//    escaped, binary BOOL bytes other than 0 and 1 are written as true.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/data_type.h"
#include "core/tensor.h"
#include "fuzz_support.h"
#include "server/http/infer_codec.h"

namespace {
using vramd::DataType;
using vramd::Tensor;
using vramd::fuzz::Fail;

bool IsUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t extra = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      extra = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      extra = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= s.size()) return false;
    for (size_t k = 1; k <= extra; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += extra + 1;
  }
  return true;
}

// Whether the JSON form of `t`'s data reads back as the same bytes (for BYTES: whether the
// encoder may write it as JSON at all).
bool JsonIsExact(const Tensor& t) {
  const auto* p = reinterpret_cast<const unsigned char*>(t.data.data());
  const size_t n = t.data.size();
  switch (t.datatype) {
    case DataType::kBool:
      for (size_t i = 0; i < n; ++i)
        if (p[i] > 1) return false;
      return true;
    case DataType::kFp16:
    case DataType::kBf16: {
      const uint16_t inf = t.datatype == DataType::kFp16 ? 0x7c00 : 0x7f80;
      for (size_t i = 0; i + 1 < n; i += 2) {
        const uint16_t h = static_cast<uint16_t>(p[i] | (p[i + 1] << 8));
        if ((h & inf) == inf) return false;
      }
      return true;
    }
    case DataType::kFp32:
      for (size_t i = 0; i + 4 <= n; i += 4) {
        float f;
        std::memcpy(&f, p + i, 4);
        if (!std::isfinite(f)) return false;
      }
      return true;
    case DataType::kFp64:
      for (size_t i = 0; i + 8 <= n; i += 8) {
        double d;
        std::memcpy(&d, p + i, 8);
        if (!std::isfinite(d)) return false;
      }
      return true;
    case DataType::kBytes: {
      auto elements = vramd::SplitBytesElements(t.data.view(), t.name, -1);
      if (!elements.ok()) Fail("a parsed BYTES input does not split: " + elements.status().ToString());
      for (auto e : *elements)
        if (!IsUtf8(e)) return false;
      return true;
    }
    default:
      return true;
  }
}

// The encoded response as a request: its "outputs" key renamed "inputs", all else as written
// (re-serializing through a DOM would round the numbers through rapidjson's own conversions).
// The first `"outputs":[` is the key: inside a string every '"' is escaped, so the text can only
// appear there after an escaped quote and before the string's closing one, which in this
// encoder is never followed by ':' (every key is its own).
std::pair<std::string, std::optional<size_t>> AsRequest(const vramd::http::EncodedBody& encoded) {
  const size_t json_size = encoded.json_length.value_or(encoded.body.size());
  std::string json = encoded.body.substr(0, json_size);
  const size_t at = json.find("\"outputs\":[");
  if (at == std::string::npos) Fail("no outputs array in " + json.substr(0, 300));
  json.replace(at, 10, "\"inputs\":");
  std::optional<size_t> length;
  if (encoded.json_length) length = json.size();
  json.append(encoded.body, json_size, std::string::npos);
  return {std::move(json), length};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::optional<size_t> json_length;
  size_t skip = 1;
  if ((data[0] & 1) != 0) {
    if (size < 3) return 0;
    json_length = static_cast<size_t>(data[1]) | (static_cast<size_t>(data[2]) << 8);
    skip = 3;
  }
  auto body = std::make_shared<const std::string>(reinterpret_cast<const char*>(data) + skip,
                                                  size - skip);
  auto parsed = vramd::http::ParseInferRequest(body, json_length);
  if (!parsed.ok()) {
    if (parsed.status().message().empty()) Fail("an error without a message");
    return 0;
  }
  const vramd::InferRequest& request = *parsed;

  vramd::InferResponse response;
  response.id = request.id;
  response.model_name = "fuzz";
  response.model_version = 1;
  response.outputs = request.inputs;
  bool refusal_expected = false;
  bool exact = true;
  size_t binary_bytes = 0;
  for (const Tensor& t : response.outputs) {
    bool binary = request.binary_data_output;
    for (const auto& o : request.outputs)
      if (o.name == t.name) binary = o.binary;
    exact = exact && IsUtf8(t.name);
    if (binary) {
      binary_bytes += t.data.size();
    } else if (t.datatype == DataType::kBytes) {
      refusal_expected = refusal_expected || !JsonIsExact(t);
    } else {
      exact = exact && JsonIsExact(t);
    }
  }
  auto result = vramd::http::EncodeInferResponse(response, request);
  if (!result.ok()) {
    if (!refusal_expected || result.status().code() != vramd::StatusCode::kInvalidArgument) {
      Fail("the encoder refused: " + result.status().ToString());
    }
    return 0;
  }
  if (refusal_expected) Fail("a BYTES element that is not UTF-8 was written as JSON");
  const vramd::http::EncodedBody& encoded = *result;

  size_t json_end = encoded.body.size();
  if (encoded.json_length) {
    if (*encoded.json_length > encoded.body.size()) Fail("json_length past the body");
    json_end = *encoded.json_length;
  }
  if (!vramd::fuzz::IsJson(std::string_view(encoded.body).substr(0, json_end))) {
    Fail("the encoded response is not JSON");
  }
  if (encoded.body.size() - json_end != binary_bytes) {
    Fail("the binary part is " + std::to_string(encoded.body.size() - json_end) +
         " bytes, the binary outputs " + std::to_string(binary_bytes));
  }
  if (!exact) return 0;

  auto again = AsRequest(encoded);
  auto reparsed = vramd::http::ParseInferRequest(
      std::make_shared<const std::string>(std::move(again.first)), again.second);
  if (!reparsed.ok()) Fail("the response does not read back: " + reparsed.status().ToString());
  if (IsUtf8(request.id) && reparsed->id != request.id) Fail("the id changed");
  if (reparsed->inputs.size() != request.inputs.size()) Fail("the tensor count changed");
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const Tensor& a = request.inputs[i];
    const Tensor& b = reparsed->inputs[i];
    if (a.name != b.name || a.datatype != b.datatype || a.shape != b.shape ||
        a.data.view() != b.data.view()) {
      Fail("tensor '" + a.name + "' (" + std::string(vramd::DataTypeWireName(a.datatype)) + " " +
           vramd::ShapeToString(a.shape) + ") read back as '" + b.name + "' (" +
           std::string(vramd::DataTypeWireName(b.datatype)) + " " + vramd::ShapeToString(b.shape) +
           ")" + (a.data.view() != b.data.view() ? ", other bytes" : ""));
    }
  }
  return 0;
}
