// Admission: memory-aware admission of executions (issue 17, item 2; docs/memory.md,
// "Admission").
//
// On a device with a budget (--memory-budget, the ledger root's quota), an execution starts only
// when what the server holds there, plus what the executions admitted and not yet ended are
// still predicted to make, plus its own predicted peak (Ledger::PredictExecutionPeak), fits the
// budget. Otherwise it waits for an admitted execution to end, up to its deadline. With none
// admitted it starts whatever its prediction: nothing running would free memory for it, and
// its allocations then fail as they would have (the budget still refuses them).
//
// On a GPU without a budget, when the server was given a way to read what the device has free
// (DeviceFree: the driver's free memory plus what the device's pool keeps cached, so memory
// other processes take counts too), an execution starts only when what the admitted
// executions are still predicted to make plus its own prediction fits what is free now. The
// same waits, deadlines and runs-alone rules apply.
//
// "Still to make": an admitted execution's prediction less what its instance has made since
// its mark (Ledger::MadeSinceMark), so that memory it already holds is not counted twice (once
// in the server's use, once in its reservation). A prediction is the largest peak seen at that
// batch size, so the sum errs high: a burst runs fewer at once than would fit, not more.
//
// Waiters are admitted in the order they came, and nothing is admitted past a waiter (not even
// an execution that would fit now): otherwise executions that fit beside each other can keep
// the device busy for ever, and one that must run alone, or a large one, never starts. (It
// did: under a sanitizer's slowness, a burst's first executions, of unknown size, waited out
// their deadlines while the later ones, measured by then, kept overlapping.)
//
// Thread safety: every method is safe from any thread. A Ticket is used by one thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"
#include "memory/device.h"
#include "memory/ledger.h"

namespace vramd::memory {

class Allocator;  // allocator.h

class Admission {
 public:
  using Clock = std::chrono::steady_clock;

  // `ledger` must outlive this object; its budget (Options::budget) is what is admitted against.
  // `allocator` (may be null; must outlive this object) describes a device's holders in the
  // error of an execution whose deadline came first (Allocator::DescribeDevice).
  // `device_free` (may be empty): what a GPU could still give the server now, nullopt when it
  // cannot say; with it, GPUs without a budget are admitted against it.
  using DeviceFree = std::function<std::optional<int64_t>(Device)>;
  explicit Admission(Ledger* ledger, const Allocator* allocator = nullptr,
                     DeviceFree device_free = nullptr);
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // An admitted execution's reservation, released (waking waiters) when destroyed.
  class Ticket {
   public:
    Ticket() = default;
    ~Ticket() { Release(); }
    Ticket(Ticket&& other) noexcept;
    Ticket& operator=(Ticket&& other) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    void Release();

   private:
    friend class Admission;
    Admission* admission_ = nullptr;
    int slot_ = 0;
    uint64_t id_ = 0;
  };

  // Whether `device` has a budget, or free memory read by DeviceFree, to admit against.
  bool Governs(Device device) const;

  // What one execution on `device` could make if it ran alone: the budget less what the server
  // holds there outside the admitted executions (what they made since their marks goes when
  // they end), or, admitted against free memory, what is free plus what they made. -1 where
  // `device` is not governed or its free memory is unknown. A batch predicted to make more can never be
  // admitted whole: the runtime splits it (docs/memory.md, "Admission").
  int64_t RoomAlone(Device device) const EXCLUDES(mu_);
  // Counts a batch split because it could never fit (DeviceStats::splits).
  void CountSplit(Device device) EXCLUDES(mu_);

  // Admits an execution predicted to make `bytes` on `device`: at once when it fits (or when
  // the device has no budget, or nothing is predicted), else after admitted executions end;
  // Unavailable naming `what`, the prediction and the device's figures when `deadline` comes
  // first.
  // `measured` is the instance that will run it, marked (Ledger::MarkPeaks) before it starts.
  Result<Ticket> Admit(Device device, int64_t bytes, OwnerId measured, Clock::time_point deadline,
                       const std::string& what) EXCLUDES(mu_);
  // Admit without waiting: the ticket when it fits now (an empty one where nothing is
  // governed), nullopt otherwise; counts nothing as waited or timed out, logs nothing. For an
  // execution on a thread that must not wait (the inline fast path), which otherwise goes to
  // its instance's thread to wait there.
  std::optional<Ticket> TryAdmit(Device device, int64_t bytes, OwnerId measured) EXCLUDES(mu_);

  // Memory went back outside an admitted execution: a request's owner closed after its reply
  // was written, freeing its outputs (runtime/request_owner.h). Waiters look again. Costs one
  // atomic read when nothing waits.
  void MemoryFreed() EXCLUDES(mu_);

  struct DeviceStats {
    Device device;
    int64_t reserved_bytes = 0;  // what admitted executions are still predicted to make
    uint64_t admitted = 0;       // executions admitted with a prediction
    uint64_t waited = 0;         // of those, admitted after waiting
    uint64_t timed_out = 0;      // deadlines that came first
    uint64_t splits = 0;         // batches split because they could never fit whole
    int64_t wait_ns = 0;         // time spent waiting, all executions
  };
  // Devices with a budget, and GPUs admitted against their free memory that admitted any.
  std::vector<DeviceStats> Stats() const EXCLUDES(mu_);

 private:
  static constexpr int kSlots = 19;  // cpu, cuda:0..16, cuda_host: the ledger's slots
  static int SlotOf(Device device);
  // What DeviceFree says of `device` now; nullopt without one.
  std::optional<int64_t> FreeNow(Device device) const;
  void Release(int slot, uint64_t id) EXCLUDES(mu_);
  // What the admitted executions on `slot` are still predicted to make.
  // Whether an execution predicted to make `bytes` fits beside those admitted on `slot`.
  bool FitsLocked(int slot, Device device, int64_t bytes) const REQUIRES(mu_);
  // Records an admitted execution; its ticket.
  Ticket AdmitLocked(int slot, OwnerId measured, int64_t bytes) REQUIRES(mu_);
  int64_t OutstandingLocked(int slot, Device device) const REQUIRES(mu_);

  struct Admitted {
    uint64_t id;
    OwnerId measured;
    int64_t bytes;
  };

  Ledger* const ledger_;
  const Allocator* const allocator_;
  const DeviceFree device_free_;
  mutable Mutex mu_;
  // An admitted execution ended, or memory was freed (MemoryFreed); waited on with mu_.
  std::condition_variable ended_;
  std::atomic<int> waiters_{0};  // executions waiting in Admit
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  // Per slot, the executions waiting in Admit, by wait number, oldest first: only the oldest
  // may be admitted, and only when it is there (Admit, TryAdmit) none is admitted at once.
  std::array<std::deque<uint64_t>, kSlots> waiting_ GUARDED_BY(mu_);
  uint64_t next_wait_ GUARDED_BY(mu_) = 1;
  std::array<std::vector<Admitted>, kSlots> admitted_ GUARDED_BY(mu_);
  std::array<DeviceStats, kSlots> stats_ GUARDED_BY(mu_){};
};

}  // namespace vramd::memory
