// BodyMemoryBudget: the request-body bytes all connections of one server may hold at once.
// A connection charges a body's declared length when its header arrives (Beast reserves that
// much before the first body byte) or, for a chunked body, what it has read so far, and
// releases it once the request is answered. Without it, clients that each send most of a
// large body and stall hold memory without bound.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <atomic>
#include <cstddef>

namespace vramd::http {

class BodyMemoryBudget {
 public:
  explicit BodyMemoryBudget(size_t limit) : limit_(limit) {}

  // Adds `bytes` to the total unless the total would exceed the limit.
  bool TryCharge(size_t bytes) {
    size_t used = used_.load(std::memory_order_relaxed);
    do {
      if (bytes > limit_ || used > limit_ - bytes) return false;
    } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    return true;
  }

  // REQUIRES: `bytes` were charged and not yet released.
  void Release(size_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }

  size_t used() const { return used_.load(std::memory_order_relaxed); }
  size_t limit() const { return limit_; }

 private:
  const size_t limit_;
  std::atomic<size_t> used_{0};
};

}  // namespace vramd::http
