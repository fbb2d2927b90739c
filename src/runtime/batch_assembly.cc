#include "runtime/batch_assembly.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <string_view>

namespace vramd::runtime {
namespace {

bool SameAfterBatchDim(const Shape& a, const Shape& b) {
  return a.size() == b.size() && !a.empty() && std::equal(a.begin() + 1, a.end(), b.begin() + 1);
}

// Byte offsets of the serialized BYTES elements in `data`: offsets[i] is where element i
// starts, and offsets.back() == data.size(). Nullopt when the data is malformed.
std::optional<std::vector<size_t>> BytesElementOffsets(std::string_view data) {
  std::vector<size_t> offsets;
  size_t pos = 0;
  while (pos < data.size()) {
    offsets.push_back(pos);
    if (data.size() - pos < 4) return std::nullopt;
    const auto* p = reinterpret_cast<const unsigned char*>(data.data() + pos);
    const uint32_t len =
        uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
    pos += 4;
    if (data.size() - pos < len) return std::nullopt;
    pos += len;
  }
  offsets.push_back(pos);
  return offsets;
}

// The byte offset where each piece of `tensor` starts when split into rows of `batch_sizes`,
// plus the end. `total` is the sum of the batch sizes (== shape[0]).
Result<std::vector<size_t>> PieceOffsets(const Tensor& tensor,
                                         const std::vector<uint64_t>& batch_sizes,
                                         uint64_t total) {
  const Shape inner(tensor.shape.begin() + 1, tensor.shape.end());
  const int64_t per_row = ElementCount(inner);
  const int64_t elements = static_cast<int64_t>(total) * per_row;
  std::vector<size_t> offsets{0};
  if (tensor.datatype == DataType::kBytes) {
    auto element_offsets = BytesElementOffsets(tensor.data.view());
    if (!element_offsets || static_cast<int64_t>(element_offsets->size()) != elements + 1) {
      return Status::Internal(fmt::format(
          "output '{}': BYTES data does not hold the {} element(s) of its shape {}", tensor.name,
          elements, ShapeToString(tensor.shape)));
    }
    uint64_t row = 0;
    for (uint64_t b : batch_sizes) {
      row += b;
      offsets.push_back((*element_offsets)[row * per_row]);
    }
    return offsets;
  }
  const size_t row_bytes = DataTypeByteSize(tensor.datatype) * static_cast<size_t>(per_row);
  if (row_bytes * total != tensor.data.size()) {
    return Status::Internal(fmt::format(
        "output '{}': {} bytes of data do not fit its shape {} of {}", tensor.name,
        tensor.data.size(), ShapeToString(tensor.shape), DataTypeWireName(tensor.datatype)));
  }
  size_t at = 0;
  for (uint64_t b : batch_sizes) {
    at += row_bytes * b;
    offsets.push_back(at);
  }
  return offsets;
}

}  // namespace

uint64_t RequestBatchSize(const InferRequest& request) {
  if (request.inputs.empty() || request.inputs[0].shape.empty()) return 1;
  return static_cast<uint64_t>(std::max<int64_t>(1, request.inputs[0].shape[0]));
}

bool CanBatchTogether(const InferRequest& a, const InferRequest& b) {
  if (a.inputs.size() != b.inputs.size()) return false;
  for (const Tensor& in : a.inputs) {
    const Tensor* other = b.FindInput(in.name);
    if (other == nullptr || other->datatype != in.datatype ||
        !SameAfterBatchDim(in.shape, other->shape)) {
      return false;
    }
  }
  return true;
}

InferRequest ConcatenateRequests(const std::vector<const InferRequest*>& requests) {
  const InferRequest& first = *requests.front();
  InferRequest merged;
  merged.model_name = first.model_name;
  merged.model_version = first.model_version;
  merged.inputs.reserve(first.inputs.size());
  std::vector<const Tensor*> parts(requests.size());
  for (const Tensor& in : first.inputs) {
    int64_t rows = 0;
    size_t bytes = 0;
    for (size_t r = 0; r < requests.size(); ++r) {
      parts[r] = r == 0 ? &in : requests[r]->FindInput(in.name);
      rows += parts[r]->shape[0];
      bytes += parts[r]->data.size();
    }
    Tensor t;
    t.name = in.name;
    t.datatype = in.datatype;
    t.shape = in.shape;
    t.shape[0] = rows;
    t.data = SharedBuffer::Allocate(bytes);
    std::byte* out = t.data.mutable_data();
    for (const Tensor* part : parts) {
      if (part->data.size() > 0) std::memcpy(out, part->data.data(), part->data.size());
      out += part->data.size();
    }
    merged.inputs.push_back(std::move(t));
  }
  return merged;
}

Result<std::vector<std::vector<Tensor>>> SplitOutputs(std::vector<Tensor> outputs,
                                                      const std::vector<uint64_t>& batch_sizes) {
  const uint64_t total = std::accumulate(batch_sizes.begin(), batch_sizes.end(), uint64_t{0});
  std::vector<std::vector<Tensor>> pieces(batch_sizes.size());
  for (auto& piece : pieces) piece.reserve(outputs.size());
  for (Tensor& out : outputs) {
    if (out.shape.empty() || out.shape[0] < 0 || static_cast<uint64_t>(out.shape[0]) != total) {
      return Status::Internal(fmt::format(
          "output '{}' has shape {}, which does not start with the batch's {} sample(s)",
          out.name, ShapeToString(out.shape), total));
    }
    VRAMD_ASSIGN_OR_RETURN(std::vector<size_t> offsets, PieceOffsets(out, batch_sizes, total));
    for (size_t r = 0; r < batch_sizes.size(); ++r) {
      Tensor t;
      t.name = out.name;
      t.datatype = out.datatype;
      t.shape = out.shape;
      t.shape[0] = static_cast<int64_t>(batch_sizes[r]);
      t.data = out.data.Slice(offsets[r], offsets[r + 1] - offsets[r]);
      pieces[r].push_back(std::move(t));
    }
  }
  return pieces;
}

Result<std::vector<Tensor>> SelectOutputs(const InferRequest& request, std::vector<Tensor> outputs,
                                          std::string_view where) {
  if (request.outputs.empty()) return outputs;
  std::vector<Tensor> selected;
  selected.reserve(request.outputs.size());
  for (const auto& wanted : request.outputs) {
    auto it = std::find_if(outputs.begin(), outputs.end(),
                           [&](const Tensor& t) { return t.name == wanted.name; });
    if (it == outputs.end()) {
      return Status::Internal(fmt::format(
          "{}: the backend did not produce requested output '{}'", where, wanted.name));
    }
    selected.push_back(std::move(*it));
  }
  return selected;
}

}  // namespace vramd::runtime
