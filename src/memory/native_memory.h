// NativeMemoryMeter: device memory that a model's libraries take outside vramd's allocator
// (cuDNN and cuBLAS handles, CUDA modules loaded lazily at a kernel's first launch, a library's
// own cudaMalloc), measured and charged to the instance that caused it, so that the memory
// report shows it under that model instead of as `unattributed`.
//
// How it is measured: NVML's figure for this process on the device, before and after a
// stretch that one instance runs (its creation, its first kExecutionsMeasured executions), less
// what vramd's pools on that device grew by meanwhile (that growth is in the ledger already).
// Measured stretches on one device are serialized, so two of them never blame each other; an
// unmeasured execution elsewhere that grows natively at the same moment would be blamed on the
// measured one, which is why only the stretches where libraries set themselves up are measured
// (a steady-state execution reuses what its first ones made). Growth below NVML's granularity
// (kMinimumCharge) is left alone; a stretch that shrinks charges nothing.
//
// A charge is a ledger allocation of the growth's size on the device, under the instance's
// owner, with a key no device pointer can have (host memory of this object's); it is released
// when the instance's NativeCharges is destroyed, before its owner closes, so it is never a
// leak. Total(ordinal) is what the memory report subtracts from the unattributed figure.
//
// Without NVML, or where NVML has no figure for this process (another PID namespace), Measure
// just runs the stretch.
//
// Thread safety: every method is safe from any thread; a NativeCharges is used by one thread at
// a time (its instance's).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "memory/allocator.h"
#include "memory/ledger.h"
#include "memory/nvml.h"

namespace vramd::memory {

class NativeMemoryMeter;

// What one instance was charged; releases it on destruction.
class NativeCharges {
 public:
  NativeCharges() = default;  // charges nothing
  NativeCharges(NativeMemoryMeter* meter, OwnerId owner, int ordinal)
      : meter_(meter), owner_(owner), ordinal_(ordinal) {}
  ~NativeCharges() { Release(); }
  NativeCharges(NativeCharges&& other) noexcept { *this = std::move(other); }
  NativeCharges& operator=(NativeCharges&& other) noexcept;
  NativeCharges(const NativeCharges&) = delete;
  NativeCharges& operator=(const NativeCharges&) = delete;

  bool active() const { return meter_ != nullptr; }
  // Runs `stretch`, measured by the meter when active (NativeMemoryMeter::Measure), else as is.
  void Measure(const std::function<void()>& stretch);
  int64_t bytes() const { return bytes_; }
  // Executions measured so far (the meter stops after kExecutionsMeasured).
  int executions_measured = 0;

 private:
  friend class NativeMemoryMeter;
  void Release();

  NativeMemoryMeter* meter_ = nullptr;
  OwnerId owner_ = kNoOwner;
  int ordinal_ = -1;
  int64_t bytes_ = 0;
  // One per charge: their addresses are the ledger keys.
  std::vector<std::unique_ptr<char>> keys_;
};

class NativeMemoryMeter {
 public:
  static constexpr int kExecutionsMeasured = 3;
  static constexpr int64_t kMinimumCharge = 1 << 20;
  static constexpr int kMaxDevices = 64;

  // `pid`: whose NVML figure to read (this process's). `ledger`, `allocator` and `nvml` must
  // outlive the meter; `nvml` may be null (nothing is measured).
  NativeMemoryMeter(Ledger* ledger, const Allocator* allocator, const Nvml* nvml, uint32_t pid);

  // Runs `stretch`, charging to `charges` what it grew on its device outside the pools.
  void Measure(NativeCharges& charges, const std::function<void()>& stretch);
  // Whether the next execution of an instance with `charges` is one to measure.
  static bool WantsExecution(const NativeCharges& charges) {
    return charges.active() && charges.executions_measured < kExecutionsMeasured;
  }

  // Bytes charged and not released on device `ordinal`.
  int64_t Total(int ordinal) const;

 private:
  friend class NativeCharges;
  std::optional<int64_t> ProcessBytes(int ordinal) const;
  int64_t PoolReserved(int ordinal) const;
  void Release(NativeCharges& charges);

  Ledger* const ledger_;
  const Allocator* const allocator_;
  const Nvml* const nvml_;
  const uint32_t pid_;
  std::array<std::mutex, kMaxDevices> device_mu_;  // serializes measured stretches per device
  std::array<std::atomic<int64_t>, kMaxDevices> totals_{};
};

}  // namespace vramd::memory
