#include "core/shared_buffer.h"

#include <cassert>

namespace vramd {

SharedBuffer SharedBuffer::Allocate(size_t size) {
  SharedBuffer b;
  if (size == 0) return b;
  auto bytes = std::make_shared_for_overwrite<std::byte[]>(size);
  b.data_ = bytes.get();
  b.size_ = size;
  b.owner_ = std::move(bytes);
  return b;
}

SharedBuffer SharedBuffer::CopyOf(const void* data, size_t size) {
  SharedBuffer b = Allocate(size);
  if (size > 0) std::memcpy(b.mutable_data(), data, size);
  return b;
}

SharedBuffer SharedBuffer::FromString(std::string bytes) {
  auto owner = std::make_shared<const std::string>(std::move(bytes));
  auto* data = reinterpret_cast<const std::byte*>(owner->data());
  size_t size = owner->size();
  return View(std::move(owner), data, size);
}

SharedBuffer SharedBuffer::View(std::shared_ptr<const void> owner, const std::byte* data, size_t size) {
  SharedBuffer b;
  b.owner_ = std::move(owner);
  b.data_ = data;
  b.size_ = size;
  return b;
}

SharedBuffer SharedBuffer::Slice(size_t offset, size_t size) const {
  assert(offset + size <= size_);
  return View(owner_, data_ + offset, size);
}

}  // namespace vramd
