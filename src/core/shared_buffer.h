// SharedBuffer: bytes with shared ownership, so a tensor can point into the request body it came
// from (no copy) and an output can alias an input (identity). The bytes are host memory unless
// the Tensor holding the buffer says they are on a GPU (core/tensor.h): then they are device
// memory that only CUDA copies may touch, and the owner returns them to memory:: when the last
// reference goes. view() and mutable_data() are for host buffers only.
//
// A buffer is written only by the code that created it with Allocate, before it is shared;
// after that it is read-only. Thread safety: const methods are safe from any thread.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

namespace vramd {

class SharedBuffer {
 public:
  SharedBuffer() = default;

  // `size` uninitialized bytes owned by the new buffer.
  static SharedBuffer Allocate(size_t size);
  static SharedBuffer CopyOf(const void* data, size_t size);
  static SharedBuffer FromString(std::string bytes);
  // A view of `size` bytes at `data`, kept alive by `owner` (null: lent()).
  static SharedBuffer View(std::shared_ptr<const void> owner, const std::byte* data, size_t size);

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_), size_}; }
  // Bytes no owner keeps (a View of nullptr): valid only for as long as whoever lent them says,
  // so a holder that must outlive that copies them.
  bool lent() const { return owner_ == nullptr && size_ > 0; }

  // REQUIRES: created by Allocate and not yet shared with a reader.
  std::byte* mutable_data() { return const_cast<std::byte*>(data_); }

  // REQUIRES: offset + size <= this->size().
  SharedBuffer Slice(size_t offset, size_t size) const;

 private:
  std::shared_ptr<const void> owner_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace vramd
