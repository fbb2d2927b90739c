// The CPU SegmentSource: aligned memory from the C library. It lets the pool's logic run (and
// be tested and benchmarked) on machines without a GPU.
#include <cstdlib>
#include <new>
#include <string>

#include "memory/segment_source.h"

namespace vramd::memory {
namespace {

// At least what cudaMalloc guarantees (256 bytes), so pool code never depends on the source.
constexpr size_t kHostSegmentAlignment = 256;

class HostSegmentSource final : public SegmentSource {
 public:
  Device device() const override { return Device::Cpu(); }

  Result<void*> Allocate(size_t size) override {
    // aligned_alloc wants a multiple of the alignment; 0 bytes still gives a unique pointer.
    size_t padded = size == 0 ? kHostSegmentAlignment : size;
    if (padded > SIZE_MAX - (kHostSegmentAlignment - 1)) return OutOfMemory(size);
    padded = (padded + kHostSegmentAlignment - 1) & ~(kHostSegmentAlignment - 1);
    void* ptr = std::aligned_alloc(kHostSegmentAlignment, padded);
    if (ptr == nullptr) return OutOfMemory(size);
    return ptr;
  }

  void Free(void* ptr, size_t /*size*/) override { std::free(ptr); }

 private:
  static Status OutOfMemory(size_t size) {
    return Status::ResourceExhausted("cpu: out of memory: the system could not allocate " +
                                     std::to_string(size) + " bytes");
  }
};

}  // namespace

std::unique_ptr<SegmentSource> MakeHostSegmentSource() {
  return std::make_unique<HostSegmentSource>();
}

}  // namespace vramd::memory
