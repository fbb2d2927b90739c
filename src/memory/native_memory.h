// NativeMemoryMeter: device memory that a model's libraries take outside vramd's allocator
// (cuDNN and cuBLAS handles, CUDA modules loaded lazily at a kernel's first launch, a library's
// own cudaMalloc), measured and charged to the owner that caused it, so that the memory report
// shows it under that model instead of as `unattributed`.
//
// How it is measured: NVML's figure for this process on the device, before and after a
// stretch, less what vramd's pools on that device grew by meanwhile (that growth is in the
// ledger already). The stretches measured are those where libraries set themselves up: a
// version's model creation (charged to the version, on each GPU its instances use), an
// instance's creation and its first kExecutionsMeasured executions (charged to the instance).
// A steady-state execution reuses what its first ones made. Measured stretches on one device
// are serialized, so two of them never blame each other; an unmeasured execution elsewhere
// that grows natively at the same moment would be blamed on the measured one. Growth below
// NVML's granularity (kMinimumCharge) is left alone; a stretch that shrinks charges nothing.
//
// What outlives its owner. An owner's end (an instance's or a version's destruction) is
// measured too (ReleaseAround): what of its charge the end did not give back stays in the
// process: modules loaded into the context, handles a library pools for the next thread. That
// part moves to the backend's residue on the device, charged to the owner
// server/backend:<name> (OwnerKind::kBackend), which the meter holds for the process's life;
// an end that gives back more than its own charge (a library freeing what a predecessor left)
// takes it out of the residue. A later owner that reuses the residue grows nothing, and is
// charged nothing. So what is left `unattributed` is what grew outside every measured
// stretch: an anomaly (unattributed_alarm.h).
//
// No stretch waits for the device without bound, because one may wait for another: an
// execution that calls another model (BLS) waits for that model's execution, and one that
// loads a model (explicit model control) for its instances' creation. An execution whose
// device is being measured runs unmeasured (MeasureExecution; a later one is measured); a
// creation or an end waits at most kCreationWait, then runs unmeasured (logged).
//
// A charge is a ledger allocation of the growth's size on the device, under its owner, with a
// key no device pointer can have (host memory of this object's); it is released when its
// NativeCharges is released or destroyed, before its owner closes, so it is never a leak.
// Total(ordinal) (charges and residues) is what the memory report subtracts from the
// unattributed figure.
//
// Without NVML, or where NVML has no figure for this process (another PID namespace), Measure
// just runs the stretch.
//
// Thread safety: every method is safe from any thread; a NativeCharges is used by one thread at
// a time (its owner's).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "memory/allocator.h"
#include "memory/ledger.h"
#include "memory/nvml.h"

namespace vramd::memory {

class NativeMemoryMeter;

// What one owner was charged on one device; releases it on destruction.
class NativeCharges {
 public:
  NativeCharges() = default;  // charges nothing
  // `backend`: whose residue what outlives the owner becomes (ReleaseAround).
  NativeCharges(NativeMemoryMeter* meter, OwnerId owner, int ordinal, std::string backend)
      : meter_(meter), owner_(owner), ordinal_(ordinal), backend_(std::move(backend)) {}
  ~NativeCharges() { Release(); }
  NativeCharges(NativeCharges&& other) noexcept { *this = std::move(other); }
  NativeCharges& operator=(NativeCharges&& other) noexcept;
  NativeCharges(const NativeCharges&) = delete;
  NativeCharges& operator=(const NativeCharges&) = delete;

  bool active() const { return meter_ != nullptr; }
  int ordinal() const { return ordinal_; }
  // Runs `stretch` (an instance's creation), measured by the meter when active
  // (NativeMemoryMeter::Measure), else as is.
  void Measure(const std::function<void()>& stretch);
  // Runs `stretch` (an execution), measured when active and no other stretch is being measured
  // on the device, counting it in executions_measured then; else as is.
  void MeasureExecution(const std::function<void()>& stretch);
  // Runs `end` (the destruction of what the owner stands for), measured when active, then
  // releases the charge; what `end` did not give back of it becomes the backend's residue.
  void ReleaseAround(const std::function<void()>& end);
  // The same for one owner's charges on several GPUs (a version's, one per device, all of one
  // meter), measured together (NativeMemoryMeter::Measure, ReleaseAround); an empty group just
  // runs the stretch. MeasureGroup: true when it measured.
  static bool MeasureGroup(std::vector<NativeCharges>& group,
                           const std::function<void()>& stretch,
                           std::chrono::milliseconds wait_for);
  static void ReleaseGroupAround(std::vector<NativeCharges>& group,
                                 const std::function<void()>& end);
  int64_t bytes() const { return bytes_; }
  // Executions measured so far (the meter stops after kExecutionsMeasured).
  int executions_measured = 0;

 private:
  friend class NativeMemoryMeter;
  void Release();

  NativeMemoryMeter* meter_ = nullptr;
  OwnerId owner_ = kNoOwner;
  int ordinal_ = -1;
  std::string backend_;
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
  // Releases the residues and closes their owners.
  ~NativeMemoryMeter();
  NativeMemoryMeter(const NativeMemoryMeter&) = delete;
  NativeMemoryMeter& operator=(const NativeMemoryMeter&) = delete;

  // Runs `stretch` once, charging to each of `charges` what it grew on that charge's device
  // outside the pools (a model's creation touches every GPU its instances will use). With
  // `wait_for` zero, measures only if no other stretch is being measured on those devices now;
  // otherwise waits that long for them. True when it measured.
  bool Measure(const std::vector<NativeCharges*>& charges, const std::function<void()>& stretch,
               std::chrono::milliseconds wait_for);
  // Runs `end` once, measured on each of `charges`' devices (waiting at most kCreationWait),
  // then releases the charges: on each device, what `end` did not give back of its charge goes
  // to the charge's backend's residue there, and what it gave back beyond leaves that residue.
  // Unmeasured (the devices busy, or no NVML figure), the charges are just released (logged).
  void ReleaseAround(const std::vector<NativeCharges*>& charges, const std::function<void()>& end);
  // Whether the next execution of an instance with `charges` is one to measure.
  static bool WantsExecution(const NativeCharges& charges) {
    return charges.active() && charges.executions_measured < kExecutionsMeasured;
  }

  // Bytes charged and not released on device `ordinal`, residues included.
  int64_t Total(int ordinal) const;
  // Of which the backends' residues.
  int64_t ResidueTotal(int ordinal) const;

 private:
  friend class NativeCharges;
  // One backend's memory on one device that outlived the owners that made it.
  struct Residue {
    int64_t bytes = 0;
    std::unique_ptr<char> key = std::make_unique<char>();  // its ledger key
  };
  struct BackendResidue {
    ScopedOwner owner;
    std::array<Residue, kMaxDevices> devices;
  };

  std::optional<int64_t> ProcessBytes(int ordinal) const;
  int64_t PoolReserved(int ordinal) const;
  // Locks the devices of `charges`, ascending (each at most `wait_for`); empty when any is busy.
  std::vector<std::unique_lock<std::timed_mutex>> LockDevices(
      const std::vector<NativeCharges*>& charges, std::chrono::milliseconds wait_for);
  // What `stretch` grew outside the pools on each charge's device (nullopt: no NVML figure).
  std::vector<std::optional<int64_t>> Growth(const std::vector<NativeCharges*>& charges,
                                             const std::function<void()>& stretch) const;
  void AdjustResidue(const std::string& backend, int ordinal, int64_t delta) EXCLUDES(residue_mu_);
  void Release(NativeCharges& charges);

  Ledger* const ledger_;
  const Allocator* const allocator_;
  const Nvml* const nvml_;
  const uint32_t pid_;
  // Serializes measured stretches per device.
  std::array<std::timed_mutex, kMaxDevices> device_mu_;
  std::array<std::atomic<int64_t>, kMaxDevices> totals_{};
  std::array<std::atomic<int64_t>, kMaxDevices> residue_totals_{};
  Mutex residue_mu_;
  std::map<std::string, BackendResidue> residues_ GUARDED_BY(residue_mu_);
};

}  // namespace vramd::memory
