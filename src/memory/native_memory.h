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
// No stretch waits for the device without bound, because one may wait for another: an
// execution that calls another model (BLS) waits for that model's execution, and one that
// loads a model (explicit model control) for its instances' creation. An execution whose
// device is being measured runs unmeasured (MeasureExecution; a later one is measured); a
// creation waits at most kCreationWait, then runs unmeasured (logged).
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
#include <chrono>
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
  // Runs `stretch` (an instance's creation), measured by the meter when active
  // (NativeMemoryMeter::Measure), else as is.
  void Measure(const std::function<void()>& stretch);
  // Runs `stretch` (an execution), measured when active and no other stretch is being measured
  // on the device, counting it in executions_measured then; else as is.
  void MeasureExecution(const std::function<void()>& stretch);
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
  static constexpr std::chrono::seconds kCreationWait{2};

  // `pid`: whose NVML figure to read (this process's). `ledger`, `allocator` and `nvml` must
  // outlive the meter; `nvml` may be null (nothing is measured).
  NativeMemoryMeter(Ledger* ledger, const Allocator* allocator, const Nvml* nvml, uint32_t pid);

  // Runs `stretch`, charging to `charges` what it grew on its device outside the pools. With
  // `wait_for` zero, measures only if no other stretch is being measured on the device now;
  // otherwise waits that long for it. True when it measured.
  bool Measure(NativeCharges& charges, const std::function<void()>& stretch,
               std::chrono::milliseconds wait_for);
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
  // Serializes measured stretches per device.
  std::array<std::timed_mutex, kMaxDevices> device_mu_;
  std::array<std::atomic<int64_t>, kMaxDevices> totals_{};
};

}  // namespace vramd::memory
