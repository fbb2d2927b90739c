// Allocator: the one way the server and its backends get memory that the ledger accounts for.
// It joins a CachingPool per device (created on first use) with the Ledger: every allocation
// is charged to an owner, every free is recorded, and Buffer frees itself (RAII).
//
// Thread safety: all methods are safe from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"
#include "memory/caching_pool.h"
#include "memory/device.h"
#include "memory/device_contexts.h"
#include "memory/ledger.h"

namespace vramd::memory {

class Allocator;

// How CUDA devices' pools get memory (docs/memory.md): cudaMalloc segments (kCaching), or
// segments of CUDA's virtual memory management (kVmm), whose free granules go back to the driver
// while the segment stays, so that memory free in pieces serves one large request.
enum class DevicePool { kCaching, kVmm };
// "caching" or "vmm"; InvalidArgument naming the choices otherwise.
Result<DevicePool> ParseDevicePool(const std::string& text);
const char* DevicePoolName(DevicePool pool);

// A block of device (or host) memory, returned to its pool when destroyed. Move-only.
class Buffer {
 public:
  Buffer() = default;
  ~Buffer() { Reset(); }
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return ptr_; }
  size_t size() const { return size_; }
  Device device() const { return device_; }
  explicit operator bool() const { return ptr_ != nullptr; }
  // Frees now.
  void Reset();

 private:
  friend class Allocator;
  Allocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
  size_t size_ = 0;
  Device device_;
};

class Allocator {
 public:
  // `ledger` must outlive the allocator.
  explicit Allocator(Ledger* ledger);
  ~Allocator();

  Ledger* ledger() const { return ledger_; }

  // `size` bytes on `device`, charged to `owner` (kNoOwner: the thread's current OwnerScope).
  // ResourceExhausted when the device is full, its message naming who holds the device (the
  // largest holders in the ledger, after what the pool caches) and logged as a warning; also
  // when the quota bounding `owner` would be passed (memory/quota.h: the pool is not asked);
  // Unavailable for a device that does not exist (cuda_host without CUDA or a GPU included).
  Result<Buffer> Allocate(Device device, size_t size, StreamId stream = 0,
                          OwnerId owner = kNoOwner) EXCLUDES(mu_);

  // The same without RAII, for the backend C ABI: the caller must Free exactly once.
  Result<void*> AllocateRaw(Device device, size_t size, StreamId stream = 0,
                            OwnerId owner = kNoOwner) EXCLUDES(mu_);
  // Frees a pointer from AllocateRaw / a Buffer on `device`. Unknown pointers are counted by the
  // ledger and otherwise ignored.
  void Free(Device device, void* ptr) EXCLUDES(mu_);

  // Returns cached, unused memory of one device / of all devices to the system; bytes returned.
  // TrimAll includes the pinned host pool (cuda_host): pinned pages cannot be swapped, so a
  // load's staging images must not stay pinned once the load is done.
  size_t Trim(Device device) EXCLUDES(mu_);
  size_t TrimAll() EXCLUDES(mu_);

  // Statistics of every pool created so far.
  std::vector<PoolStats> PoolStatistics() const EXCLUDES(mu_);
  // The pool of `device`, created if needed; Unavailable if the device does not exist.
  Result<CachingPool*> Pool(Device device) EXCLUDES(mu_);

  // A line about `device` that out-of-memory messages end with, for what the ledger cannot say
  // (NVML's free memory, memory outside the pools: DeviceMemoryNote). Set once, before the
  // allocator is shared; `note` must be safe from any thread and may allocate nothing through
  // this allocator.
  void SetDeviceNote(std::function<std::string(Device)> note) { device_note_ = std::move(note); }

  // The kind of pool CUDA devices get. Set once, before the first CUDA allocation.
  void SetDevicePool(DevicePool pool) { device_pool_ = pool; }
  // Where a GPU's context is made and measured before its pool's first segment (not owned;
  // null: CUDA makes it on first use, unmeasured). Set before the first CUDA allocation, and
  // reset to null before `contexts` goes.
  void SetDeviceContexts(DeviceContexts* contexts) { contexts_ = contexts; }
  DevicePool device_pool() const { return device_pool_; }

  // Memory pressure (docs/memory.md, "Sleeping models"): an allocation made on a thread inside
  // a ReliefScope (a model's load, a model's wake) that the server's budget refuses, or that
  // its device cannot give, calls `relief` (not owned; null removes it) with the device, the
  // size and the owner asking, one call at a time; it puts one idle model using that device
  // to sleep and returns true, or false when none could; the allocation is tried again after
  // each true. An allocation it makes is never relieved in turn. SetPressureRelief waits for a
  // call in progress, so `relief` may be destroyed once it is removed.
  class PressureRelief {
   public:
    virtual ~PressureRelief() = default;
    virtual bool Relieve(Device device, size_t size, OwnerId asking) = 0;
  };
  void SetPressureRelief(PressureRelief* relief) EXCLUDES(relief_mu_) {
    MutexLock lock(relief_mu_);
    relief_ = relief;
  }
  PressureRelief* pressure_relief() const EXCLUDES(relief_mu_) {
    MutexLock lock(relief_mu_);
    return relief_;
  }
  // Marks the calling thread's allocations as ones that may relieve memory pressure, for the
  // scope's life (scopes nest).
  class ReliefScope {
   public:
    ReliefScope();
    ~ReliefScope();
    ReliefScope(const ReliefScope&) = delete;
    ReliefScope& operator=(const ReliefScope&) = delete;
  };

  // Sleeping in place (docs/memory.md, "Sleeping in place"): for memory a backend keeps
  // pointers into, such as torch's tensors in the python backend. Park copies every live
  // allocation charged to `owner` or below it (through versions and instances only, as
  // Ledger::LiveAllocationsBelow), on each of `devices` whose pool can evict (a VMM pool:
  // --device-pool=vmm), to host memory (pinned for a GPU) charged to `owner`, then gives the
  // device memory under it back (CachingPool::Evict) and ends its charge in the ledger. The
  // addresses stay reserved: the backend's pointers are valid again after Unpark, and must not
  // be used before. Returns the bytes given back to the devices. A failure (no host memory)
  // unparks what it parked and returns the error.
  // The server parks GPUs only: host memory gains nothing from a copy to host memory, and a
  // host allocation's owner may read it (numpy's handler reads its header when it frees).
  Result<size_t> Park(OwnerId owner, const std::vector<Device>& devices)
      EXCLUDES(mu_, park_mu_);
  // Maps memory again under every allocation `owner`'s Park parked, charges each to its owner
  // again and copies its bytes back, then frees the host copies. Inside a ReliefScope, a
  // refusal by the budget or the device first puts other idle models to sleep, as an
  // allocation would. A refusal leaves what is not yet restored parked (the error names it); a
  // later Unpark goes on from there. Freeing a parked allocation is fine (its copy goes too).
  Status Unpark(OwnerId owner) EXCLUDES(mu_, park_mu_);
  // The bytes `owner`'s Park holds parked now.
  size_t ParkedBytes(OwnerId owner) const EXCLUDES(park_mu_);
  // Whether some pool could Park: the device pools are VMM pools.
  bool CanPark() const { return device_pool_ == DevicePool::kVmm; }

  // Who holds `device`, for the errors of memory that could not be had (out of memory, the
  // budget, admission): "Held on cuda:0: 7.5 GiB by 3 owner(s), the most by
  // server/model:a/version:1 6.0 GiB; ...; its pool keeps 1.0 GiB cached of 8.5 GiB reserved
  // (GET /v2/memory has the whole tree)." and the device note. Creates no pool.
  std::string DescribeDevice(Device device) const EXCLUDES(mu_);

  // Fault injection, for tests of what a failed allocation leaves behind: the `nth` allocation
  // from now (1 = the next one) answers ResourceExhausted "injected allocation failure"; later
  // ones succeed again. 0 cancels a pending injection.
  void InjectFailure(uint64_t nth) { fail_countdown_.store(nth); }

 private:

  Ledger* const ledger_;
  std::function<std::string(Device)> device_note_;  // set before sharing; then read-only
  DevicePool device_pool_ = DevicePool::kCaching;    // set before sharing; then read-only
  DeviceContexts* contexts_ = nullptr;               // set before sharing; then read-only
  // Held while relief_ runs, so that relief calls are one at a time and SetPressureRelief
  // waits for them. Taken before mu_ (Pool), never after.
  mutable Mutex relief_mu_;
  PressureRelief* relief_ GUARDED_BY(relief_mu_) = nullptr;
  // Who refused an allocation: nobody, the server's budget, an owner's own quota, the device.
  enum class Refusal { kNone, kBudget, kQuota, kDevice };
  // One try of AllocateRaw: charge, then the pool; `*refusal` says who refused.
  Result<void*> TryAllocate(CachingPool* pool, Device device, size_t size, StreamId stream,
                            OwnerId owner, Refusal* refusal);
  // After `failed`, the first try of `attempt` (refused by `refusal`), inside a ReliefScope:
  // relieves pressure and tries again while the budget or the device refused.
  template <typename T, typename Attempt>
  T RetryUnderRelief(Device device, size_t size, OwnerId owner, Refusal refusal, T failed,
                     Attempt attempt) EXCLUDES(relief_mu_);

  // An allocation Park took off its device.
  struct Parked {
    Device device;
    size_t size = 0;
    OwnerId owner = kNoOwner;      // charged to, before and after
    OwnerId parked_by = kNoOwner;  // Park's argument
    Buffer copy;                   // its bytes while parked
  };
  // Charges `p` to its owner again and maps memory under it at `ptr` (the copy back is the
  // caller's); `*refusal` says who refused.
  Result<Ledger::PendingCharge> TryMapAgain(const void* ptr, const Parked& p, Refusal* refusal);
  // Removes the parked record of `ptr` (true) when there is one; its copy is freed by the caller
  // outside park_mu_ (Free is reentrant through it).
  bool TakeParked(const void* ptr, Parked* out) EXCLUDES(park_mu_);
  mutable Mutex park_mu_;
  std::map<const void*, Parked> parked_ GUARDED_BY(park_mu_);
  std::atomic<size_t> parked_count_{0};  // parked_.size(), read without the lock by Free
  std::atomic<uint64_t> fail_countdown_{0};  // 0: none pending
  // Pool() is on every allocation and free; the pools of the first kFastIndices ordinals of each
  // device type are also kept here, read without mu_ (a pool, once made, lives as long as the
  // allocator).
  static constexpr int kFastIndices = 16;
  static constexpr int kDeviceTypes = 3;
  std::array<std::atomic<CachingPool*>, kDeviceTypes * kFastIndices> fast_pools_{};

  mutable Mutex mu_;
  std::map<std::pair<int, int>, std::unique_ptr<CachingPool>> pools_ GUARDED_BY(mu_);
};

}  // namespace vramd::memory
