// Ledger: who owns every byte. Each allocation the server or a backend makes through memory::
// is recorded with its owner, size, device, time and (with tracing on) the native backtrace of
// the allocation site.
//
// Owners form a tree: server (the root) > model > version > instance > request, plus ad-hoc
// scopes and backends (what a backend's libraries keep beyond its models). An owner is opened under a parent and closed when what it stands for ends (a request
// answered, an instance destroyed, a version unloaded). Closing an owner that still holds
// allocations files a LeakReport: it is logged through the leak callback, counted in
// leaked_bytes_total(), and kept in Leaks(). Nothing is freed silently: leaked allocations stay
// recorded under their closed owner until someone frees them, and the report shows what is still
// live. A closed owner disappears from the tree once it holds nothing.
//
// Per owner, OwnerStats counts live bytes and allocations, the peak of live bytes, and the
// cumulative bytes and allocations ever charged to it; subtree figures add up descendants.
//
// Thread safety: every method is safe from any thread. RecordAllocation and RecordFree are the
// hot path (target: < 200 ns for the pair, without tracing): they take sharded mutexes, one at
// a time, and the tree's mutex only on rare paths. Locking, lock order and memory bounds: the
// note atop ledger.cc; tracing and its cost: memory/backtrace.h.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "memory/device.h"
#include "memory/quota.h"

namespace vramd::memory {

using OwnerId = uint64_t;
inline constexpr OwnerId kNoOwner = 0;

// kBackend: what a backend's libraries keep in the process beyond the models that made it
// (memory/native_memory.h), directly under the server.
enum class OwnerKind { kServer, kModel, kVersion, kInstance, kRequest, kScope, kSequence, kBackend };
std::string_view OwnerKindName(OwnerKind kind);  // "server", "model", ...

struct OwnerStats {
  int64_t live_bytes = 0;
  int64_t live_count = 0;
  int64_t peak_bytes = 0;             // highest live_bytes seen
  int64_t total_allocated_bytes = 0;  // cumulative
  int64_t total_allocations = 0;      // cumulative
};

struct AllocationInfo {
  uintptr_t address = 0;
  size_t size = 0;
  Device device;
  std::chrono::system_clock::time_point time;
  std::vector<std::string> backtrace;  // symbolized frames, innermost first; empty untraced
};

struct LeakReport {
  OwnerId owner = kNoOwner;
  OwnerKind kind = OwnerKind::kScope;
  std::string owner_path;  // "server/model:add_sub/version:1/request:42"
  std::chrono::system_clock::time_point closed_at;
  size_t bytes = 0;        // live when the owner closed
  size_t count = 0;
  size_t still_live_bytes = 0;  // as of the call that returned this report
  std::vector<AllocationInfo> allocations;  // the largest ones, at most 16
};

// What an owner's own quota allows and holds on one device (Ledger::Snapshot).
struct QuotaUse {
  Device device;  // kCuda with index kEveryGpu: a limit for each GPU that none has used yet
  int64_t limit_bytes = 0;
  int64_t used_bytes = 0;  // the subtree's live bytes on the device, counted since it opened
  uint64_t refusals = 0;   // allocations refused by this limit
};

// The largest rise of a measured owner's subtree on a device over one execution of a batch of
// this size (Ledger::LearnExecutionPeaks).
struct ExecutionPeak {
  Device device;
  int64_t batch_size = 0;
  int64_t bytes = 0;
};

struct OwnerSnapshot {
  OwnerId id = kNoOwner;
  OwnerId parent = kNoOwner;  // kNoOwner for the root
  OwnerKind kind = OwnerKind::kScope;
  std::string name;
  bool closed = false;
  OwnerStats self;
  int64_t subtree_live_bytes = 0;  // self + every descendant
  int64_t subtree_live_count = 0;
  // Self only, non-zero entries, in the order cpu, cuda:0.., cuda_host. CUDA ordinals outside
  // 0..15 share one entry, cuda:16.
  std::vector<std::pair<Device, int64_t>> live_bytes_by_device;
  // The owner's own quota (memory/quota.h), one entry per device it bounds; empty when the owner
  // opened with none (an inherited quota shows on the owner that set it).
  std::vector<QuotaUse> quota;
  // What LearnExecutionPeaks learned for this owner, by device then batch size.
  std::vector<ExecutionPeak> execution_peaks;
};

class Ledger {
 public:
  struct Options {
    bool trace = false;  // capture a backtrace per allocation (--memory-trace)
    int max_frames = 32;
    // The root's quota (--memory-budget): what the server may hold per device, every owner's
    // charges together; inside it, model quotas apply as well.
    MemoryQuota budget;
  };

  class Impl;

  // An allocation charged before its memory exists, so that a quota can refuse it first:
  // Charge, make the memory, Commit its address. Destroyed uncommitted (the memory could not be
  // made), it undoes the charge. Move-only; used by one thread at a time.
  class PendingCharge {
   public:
    PendingCharge() = default;
    ~PendingCharge();
    PendingCharge(PendingCharge&& other) noexcept;
    PendingCharge& operator=(PendingCharge&& other) noexcept;
    PendingCharge(const PendingCharge&) = delete;
    PendingCharge& operator=(const PendingCharge&) = delete;

   private:
    friend class Ledger;
    Impl* impl_ = nullptr;
    void* node_ = nullptr;  // the owner charged, pinned until committed or undone
    size_t size_ = 0;
    Device device_;
  };

  explicit Ledger(Options options);
  Ledger() : Ledger(Options()) {}
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // The server owner, open for the ledger's lifetime.
  OwnerId root() const;

  // A new open owner; `parent` kNoOwner means the root. `name` is shown in paths and reports
  // ("add_sub", "1", "add_sub_0", a request id). Under a closed `parent` the owner opens under
  // its nearest open ancestor; under an unknown one, under the root.
  // `quota` (memory/quota.h), when not empty, bounds what the owner and every owner opened
  // below it hold, per device, together with the quotas of its ancestors (each applies).
  OwnerId OpenOwner(OwnerId parent, OwnerKind kind, std::string name, MemoryQuota quota = {});

  // Closes `owner` and its open descendants (deepest first), filing one LeakReport for each
  // that still holds allocations; returns those reports. Closing the root or an unknown or
  // closed owner does nothing.
  std::vector<LeakReport> CloseOwner(OwnerId owner);

  // Charges `size` bytes at `ptr` on `device` to `owner` (kNoOwner: the thread's
  // OwnerScope::Current(), else the root). A closed owner's charges go to its nearest open
  // ancestor; an owner no longer in the tree (closed clean, or never opened) charges the root.
  // A null `ptr` is ignored. A `ptr` recorded again without a free replaces its old record.
  // Counted against the owner's quota, never refused (the memory exists already).
  void RecordAllocation(const void* ptr, size_t size, Device device, OwnerId owner = kNoOwner);

  // The first half of an allocation the server makes: `owner` (resolved as RecordAllocation
  // resolves it) is charged `size` bytes on `device`, or, when that would pass the quota that
  // bounds it, ResourceExhausted naming the quota's owner, its limit, what it holds and the
  // owner that asked; nothing is charged then. `*by_budget` (when given) says, on a refusal,
  // whether the quota was the server's budget (Options::budget) rather than an owner's own.
  Result<PendingCharge> Charge(Device device, size_t size, OwnerId owner = kNoOwner,
                               bool* by_budget = nullptr);

  // Execution peaks: what one execution needs, per device and batch size, learned from what
  // it made. For owners opened with a quota (MeasurePeaks() for one without limits); others
  // are ignored. MarkPeaks: `owner`'s subtree's peak starts again from what it holds now (an
  // instance, before an execution: an instance runs one at a time). LearnExecutionPeaks:
  // the rise of `measured`'s peak over its mark, per device, is kept for `learner` (the
  // version) at `batch_size` when larger than what it kept; Snapshot shows it. On `device`,
  // where the execution ran, a figure is kept even when it made nothing (0).
  void MarkPeaks(OwnerId owner);
  void LearnExecutionPeaks(OwnerId measured, OwnerId learner, int64_t batch_size, Device device);
  // What an execution of `batch_size` under `learner` is expected to make on `device`: the
  // figure learned at that batch size; else the one at the nearest larger size learned; else
  // the one at the largest smaller size, scaled up in proportion; kUnknownPeak when nothing
  // was learned on `device` (admission.h runs such an execution alone).
  static constexpr int64_t kUnknownPeak = -1;
  int64_t PredictExecutionPeak(OwnerId learner, Device device, int64_t batch_size) const;
  // The same without scaling: the figure learned at `batch_size` or the nearest larger size
  // learned (a bound seen, not a guess); kUnknownPeak otherwise.
  int64_t LearnedExecutionPeak(OwnerId learner, Device device, int64_t batch_size) const;
  // What `owner`'s subtree holds on `device` above its mark now (0 for an owner not measured).
  int64_t MadeSinceMark(OwnerId owner, Device device) const;

  // The server's budget on `device` (Options::budget): {what every owner holds there, the
  // limit}; {0, 0} without one.
  std::pair<int64_t, int64_t> BudgetOf(Device device) const;
  // The second half: the memory at `ptr` is recorded under the charge (as RecordAllocation
  // would). A null `ptr` or an empty charge does nothing.
  void Commit(PendingCharge charge, const void* ptr);

  // Removes the record for `ptr`; returns the owner it was charged to, kNoOwner for a pointer
  // the ledger does not know (counted as unknown_frees()). A null `ptr` is ignored.
  OwnerId RecordFree(const void* ptr);

  // Moves the charge of the live allocation at `ptr` to `owner` (resolved as RecordAllocation
  // resolves it), for memory an owner made that outlives it by design: a framework's state kept
  // in a model shared by instances, made while one instance ran. The new owner's live and peak
  // bytes grow, not its totals (no allocation was made). NotFound when `ptr` is not live.
  Status Recharge(const void* ptr, OwnerId owner);
  // Whether a live allocation starts at `ptr`: what Recharge can move.
  bool Knows(const void* ptr) const;

  // The live allocations on `device` charged to `owner` or to a version or instance owner below
  // it, through such owners only: what a model keeps, not what its requests or sequences hold
  // (a response may still be on its way to a client). What a model sleeping in place parks
  // (Allocator::Park). NotFound for an unknown owner.
  struct LiveAllocation {
    const void* ptr;
    size_t size;
    OwnerId owner;
  };
  Result<std::vector<LiveAllocation>> LiveAllocationsBelow(OwnerId owner, Device device);

  // Self figures; NotFound for an owner that never existed or has been dropped (a closed owner
  // that still holds leaks is found).
  Result<OwnerStats> Stats(OwnerId owner) const;
  // Live bytes of the owner and its descendants.
  Result<int64_t> SubtreeLiveBytes(OwnerId owner) const;
  // "server/model:add_sub/..." or "" for unknown.
  std::string OwnerPath(OwnerId owner) const;

  // Every owner still in the tree, parents before children.
  std::vector<OwnerSnapshot> Snapshot() const;
  // Every leak filed so far (most recent 1000), with still_live_bytes updated.
  std::vector<LeakReport> Leaks() const;
  uint64_t leaked_bytes_total() const;
  uint64_t leak_reports_total() const;
  uint64_t unknown_frees() const;
  uint64_t quota_refusals_total() const;

  void set_trace(bool on);
  bool trace() const;
  // Called once per LeakReport filed, outside the ledger's locks.
  void SetLeakCallback(std::function<void(const LeakReport&)> callback);

 private:
  std::unique_ptr<Impl> impl_;
};

class LazyOwner;

// Makes `owner` the calling thread's current owner until destroyed (scopes nest).
class OwnerScope {
 public:
  explicit OwnerScope(OwnerId owner);
  // The current owner is `lazy`, opened by the first allocation charged to this scope.
  // REQUIRES: `lazy` is not moved or destroyed while the scope lives.
  explicit OwnerScope(LazyOwner* lazy);
  ~OwnerScope();
  OwnerScope(const OwnerScope&) = delete;
  OwnerScope& operator=(const OwnerScope&) = delete;
  // kNoOwner when no scope is active on this thread; opens a lazy scope's owner.
  static OwnerId Current();

 private:
  OwnerId previous_;
  LazyOwner* previous_lazy_;
};

// An owner opened on construction and closed on destruction (or by Close).
class ScopedOwner {
 public:
  ScopedOwner() = default;  // holds no owner
  ScopedOwner(Ledger* ledger, OwnerId parent, OwnerKind kind, std::string name,
              MemoryQuota quota = {});
  ~ScopedOwner();
  ScopedOwner(ScopedOwner&& other) noexcept;
  ScopedOwner& operator=(ScopedOwner&& other) noexcept;
  ScopedOwner(const ScopedOwner&) = delete;
  ScopedOwner& operator=(const ScopedOwner&) = delete;

  OwnerId id() const { return id_; }
  // Closes now; the leak reports filed (empty when clean). Idempotent.
  std::vector<LeakReport> Close();

 private:
  Ledger* ledger_ = nullptr;
  OwnerId id_ = kNoOwner;
};

// An owner opened only when something is charged to it: under an OwnerScope(LazyOwner*), the
// first allocation charged to the scope opens it. A request that allocates nothing through the
// ledger then costs no change to the owner tree, and leaves no trace in it. Closed on
// destruction, when it was opened. Used by one thread at a time.
class LazyOwner {
 public:
  LazyOwner() = default;  // holds nothing and never opens
  LazyOwner(Ledger* ledger, OwnerId parent, OwnerKind kind, std::string name);
  ~LazyOwner();
  LazyOwner(LazyOwner&& other) noexcept;
  LazyOwner& operator=(LazyOwner&& other) noexcept;
  LazyOwner(const LazyOwner&) = delete;
  LazyOwner& operator=(const LazyOwner&) = delete;

  // The owner's id, opening it now if needed; kNoOwner for a default-constructed one.
  OwnerId Open();
  bool opened() const { return id_ != kNoOwner; }
  OwnerId id() const { return id_; }  // kNoOwner until opened; never opens
  Ledger* ledger() const { return ledger_; }
  // Closes the owner if it was opened: the leak reports filed. Idempotent.
  std::vector<LeakReport> Close();

 private:
  Ledger* ledger_ = nullptr;
  OwnerId parent_ = kNoOwner;
  OwnerKind kind_ = OwnerKind::kScope;
  std::string name_;
  OwnerId id_ = kNoOwner;
};

}  // namespace vramd::memory
