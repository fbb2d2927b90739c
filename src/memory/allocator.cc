#include "memory/allocator.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "memory/byte_size.h"
#include "memory/cuda_devices.h"

namespace vramd::memory {

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Reset();
    allocator_ = std::exchange(other.allocator_, nullptr);
    ptr_ = std::exchange(other.ptr_, nullptr);
    size_ = std::exchange(other.size_, 0);
    device_ = other.device_;
  }
  return *this;
}

void Buffer::Reset() {
  if (ptr_ != nullptr) allocator_->Free(device_, ptr_);
  allocator_ = nullptr;
  ptr_ = nullptr;
  size_ = 0;
}

namespace {

Result<std::unique_ptr<SegmentSource>> MakeSource(Device device, DevicePool kind) {
  switch (device.type) {
    case DeviceType::kCpu:
      // The VMM policy over mmap: nothing to gain on the host, but the same code as a GPU's
      // runs, and is tested, where there is none.
      if (kind == DevicePool::kVmm) return MakeHostVmmSegmentSource(SIZE_MAX / 4, 2 << 20);
      return MakeHostSegmentSource();
    case DeviceType::kCuda:
      return kind == DevicePool::kVmm ? MakeCudaVmmSegmentSource(device.index)
                                      : MakeCudaSegmentSource(device.index);
    case DeviceType::kCudaHost: return MakeCudaHostSegmentSource();
  }
  return Status::InvalidArgument(
      fmt::format("no memory source for device type {}", static_cast<int>(device.type)));
}

// How many holders an out-of-memory message names.
constexpr size_t kHoldersNamed = 5;

}  // namespace

Result<DevicePool> ParseDevicePool(const std::string& text) {
  if (text == "caching") return DevicePool::kCaching;
  if (text == "vmm") return DevicePool::kVmm;
  return Status::InvalidArgument(
      fmt::format("unknown device pool \"{}\": choose \"caching\" or \"vmm\"", text));
}

const char* DevicePoolName(DevicePool pool) {
  return pool == DevicePool::kVmm ? "vmm" : "caching";
}

std::string Allocator::DescribeDevice(Device device) const {
  struct Holder {
    OwnerId id;
    int64_t bytes;
  };
  std::vector<Holder> holders;
  int64_t total = 0;
  for (const OwnerSnapshot& owner : ledger_->Snapshot()) {
    for (const auto& [on, bytes] : owner.live_bytes_by_device) {
      if (on != device || bytes <= 0) continue;
      holders.push_back({owner.id, bytes});
      total += bytes;
    }
  }
  std::sort(holders.begin(), holders.end(),
            [](const Holder& a, const Holder& b) { return a.bytes > b.bytes; });
  std::string text = fmt::format("Held on {}: {} by {} owner(s)", device.ToString(),
                                 FormatBytes(static_cast<size_t>(total)), holders.size());
  for (size_t i = 0; i < holders.size() && i < kHoldersNamed; ++i) {
    text += fmt::format("{} {} {}", i == 0 ? ", the most by" : ";", ledger_->OwnerPath(holders[i].id),
                        FormatBytes(static_cast<size_t>(holders[i].bytes)));
  }
  if (holders.size() > kHoldersNamed) {
    text += fmt::format("; and {} more", holders.size() - kHoldersNamed);
  }
  for (const PoolStats& pool : PoolStatistics()) {
    if (pool.device != device) continue;
    text += fmt::format("; its pool keeps {} cached of {} reserved",
                        FormatBytes(pool.cached_free_bytes), FormatBytes(pool.reserved_bytes));
  }
  text += " (GET /v2/memory has the whole tree).";
  if (device_note_) {
    if (std::string note = device_note_(device); !note.empty()) text += " " + note;
  }
  return text;
}

Allocator::Allocator(Ledger* ledger) : ledger_(ledger) {}

Allocator::~Allocator() {
  // Host copies of what is still parked are freed while the pools and the map are whole (their
  // Free comes back here).
  std::map<const void*, Parked> parked;
  {
    MutexLock lock(park_mu_);
    parked.swap(parked_);
    parked_count_.store(0, std::memory_order_release);
  }
}

Result<CachingPool*> Allocator::Pool(Device device) {
  const int type = static_cast<int>(device.type);
  std::atomic<CachingPool*>* fast = nullptr;
  if (type >= 0 && type < kDeviceTypes && device.index >= 0 && device.index < kFastIndices) {
    fast = &fast_pools_[static_cast<size_t>(type * kFastIndices + device.index)];
    if (CachingPool* pool = fast->load(std::memory_order_acquire)) return pool;
  }
  MutexLock lock(mu_);
  auto key = std::make_pair(type, device.index);
  auto it = pools_.find(key);
  if (it != pools_.end()) return it->second.get();
  // A source that is unavailable leaves no pool behind: the next call asks again.
  if (contexts_ != nullptr && device.type != DeviceType::kCpu) {
    // Pinned memory is made in the calling thread's current GPU's context.
    VRAMD_RETURN_IF_ERROR(
        contexts_->Open(device.is_cuda() ? device.index : CudaCurrentDevice()));
  }
  VRAMD_ASSIGN_OR_RETURN(std::unique_ptr<SegmentSource> source, MakeSource(device, device_pool_));
  auto pool = std::make_unique<CachingPool>(std::move(source));
  CachingPool* raw = pool.get();
  pools_.emplace(key, std::move(pool));
  if (fast != nullptr) fast->store(raw, std::memory_order_release);
  return raw;
}

namespace {
// The calling thread's ReliefScopes, and whether it is inside the relief callback.
thread_local int relief_depth = 0;
thread_local bool in_relief = false;
}  // namespace

Result<void*> Allocator::AllocateRaw(Device device, size_t size, StreamId stream, OwnerId owner) {
  for (uint64_t n = fail_countdown_.load(); n > 0;) {
    if (fail_countdown_.compare_exchange_weak(n, n - 1)) {
      if (n == 1) {
        return Status::ResourceExhausted(fmt::format(
            "injected allocation failure ({} bytes on {})", size, device.ToString()));
      }
      break;
    }
  }
  VRAMD_ASSIGN_OR_RETURN(CachingPool * pool, Pool(device));
  Refusal refusal = Refusal::kNone;
  Result<void*> made = TryAllocate(pool, device, size, stream, owner, &refusal);
  if (made.ok() || relief_depth == 0 || in_relief) return made;
  return RetryUnderRelief(device, size, owner, refusal, std::move(made), [&](Refusal* r) {
    return TryAllocate(pool, device, size, stream, owner, r);
  });
}

template <typename T, typename Attempt>
T Allocator::RetryUnderRelief(Device device, size_t size, OwnerId owner, Refusal refusal,
                              T failed, Attempt attempt) {
  const OwnerId asking = owner != kNoOwner ? owner : OwnerScope::Current();
  MutexLock lock(relief_mu_);
  // Sleeping another model frees what counts against the budget and what the device has; a
  // model's own quota it cannot relieve.
  while (relief_ != nullptr && !failed.ok() &&
         (refusal == Refusal::kBudget || refusal == Refusal::kDevice)) {
    in_relief = true;
    const bool relieved = relief_->Relieve(device, size, asking);
    in_relief = false;
    if (!relieved) break;
    failed = attempt(&refusal);
  }
  return failed;
}

Result<void*> Allocator::TryAllocate(CachingPool* pool, Device device, size_t size,
                                     StreamId stream, OwnerId owner, Refusal* refusal) {
  // Charged first, so that a quota refuses before the pool makes anything.
  bool by_budget = false;
  Result<Ledger::PendingCharge> charge = ledger_->Charge(device, size, owner, &by_budget);
  *refusal = Refusal::kNone;
  if (!charge.ok()) {
    *refusal = by_budget ? Refusal::kBudget : Refusal::kQuota;
    if (by_budget) {
      // The whole server is at its budget: who holds it, as for a device out of memory.
      Status refused(StatusCode::kResourceExhausted,
                     fmt::format("{}. {}", charge.status().message(), DescribeDevice(device)));
      spdlog::warn("{}", refused.message());
      return refused;
    }
    spdlog::warn("{}", charge.status().message());
    return charge.status();
  }
  Result<void*> ptr = pool->Allocate(size, stream);
  if (!ptr.ok()) {
    *charge = Ledger::PendingCharge();  // undone now: the holders named below exclude it
    if (ptr.status().code() != StatusCode::kResourceExhausted) return ptr.status();
    *refusal = Refusal::kDevice;
    // Who holds the device: the pool's message says what it caches, the ledger who holds the
    // rest. Logged too: the caller may shorten the error or not show it.
    Status exhausted(StatusCode::kResourceExhausted,
                     fmt::format("{} {}", ptr.status().message(), DescribeDevice(device)));
    spdlog::warn("{}", exhausted.message());
    return exhausted;
  }
  ledger_->Commit(std::move(*charge), *ptr);
  return *ptr;
}

Allocator::ReliefScope::ReliefScope() { ++relief_depth; }
Allocator::ReliefScope::~ReliefScope() { --relief_depth; }

Result<Buffer> Allocator::Allocate(Device device, size_t size, StreamId stream, OwnerId owner) {
  VRAMD_ASSIGN_OR_RETURN(void* ptr, AllocateRaw(device, size, stream, owner));
  Buffer b;
  b.allocator_ = this;
  b.ptr_ = ptr;
  b.size_ = size;
  b.device_ = device;
  return b;
}

void Allocator::Free(Device device, void* ptr) {
  if (ptr == nullptr) return;
  Parked parked;
  if (parked_count_.load(std::memory_order_acquire) == 0 || !TakeParked(ptr, &parked)) {
    ledger_->RecordFree(ptr);
  }
  // A parked allocation's charge ended when it was parked; its copy goes with `parked`.
  auto pool = Pool(device);
  if (pool.ok()) (*pool)->Free(ptr);
}

bool Allocator::TakeParked(const void* ptr, Parked* out) {
  MutexLock lock(park_mu_);
  auto it = parked_.find(ptr);
  if (it == parked_.end()) return false;
  *out = std::move(it->second);
  parked_.erase(it);
  parked_count_.store(parked_.size(), std::memory_order_release);
  return true;
}

Result<size_t> Allocator::Park(OwnerId owner, const std::vector<Device>& devices) {
  std::vector<CachingPool*> pools;
  {
    MutexLock lock(mu_);
    for (auto& [key, pool] : pools_) {
      if (std::find(devices.begin(), devices.end(), pool->device()) != devices.end() &&
          pool->decommit_granularity() > 0) {
        pools.push_back(pool.get());
      }
    }
  }
  size_t given_back = 0;
  for (CachingPool* pool : pools) {
    const Device device = pool->device();
    VRAMD_ASSIGN_OR_RETURN(std::vector<Ledger::LiveAllocation> live,
                           ledger_->LiveAllocationsBelow(owner, device));
    const Device host = device.is_cuda() ? Device::CudaHost() : Device::Cpu();
    for (const Ledger::LiveAllocation& a : live) {
      // The ledger also holds what was charged without coming from the pool (memory a library
      // took, measured and recorded at a made-up address: native_memory.h); only the pool's
      // blocks are memory to move.
      if (pool->RequestedSize(const_cast<void*>(a.ptr)) == 0) continue;
      Parked p{device, a.size, a.owner, owner, Buffer()};
      Status parked = [&]() -> Status {
        VRAMD_ASSIGN_OR_RETURN(p.copy, Allocate(host, a.size, 0, owner));
        VRAMD_RETURN_IF_ERROR(CopyBytes(host, p.copy.data(), device, a.ptr, a.size, nullptr));
        VRAMD_ASSIGN_OR_RETURN(size_t bytes, pool->Evict(const_cast<void*>(a.ptr)));
        given_back += bytes;
        return Status::Ok();
      }();
      if (!parked.ok()) {
        Status undone = Unpark(owner);
        if (!undone.ok()) spdlog::error("undoing a failed park: {}", undone.message());
        return Status(parked.code(), fmt::format("parking {} at {} on {}: {}", FormatBytes(a.size),
                                                 a.ptr, device.ToString(), parked.message()));
      }
      ledger_->RecordFree(a.ptr);
      MutexLock lock(park_mu_);
      parked_.emplace(a.ptr, std::move(p));
      parked_count_.store(parked_.size(), std::memory_order_release);
    }
  }
  return given_back;
}

Result<Ledger::PendingCharge> Allocator::TryMapAgain(const void* ptr, const Parked& p,
                                                    Refusal* refusal) {
  VRAMD_ASSIGN_OR_RETURN(CachingPool * pool, Pool(p.device));
  bool by_budget = false;
  Result<Ledger::PendingCharge> charge = ledger_->Charge(p.device, p.size, p.owner, &by_budget);
  if (!charge.ok()) {
    *refusal = by_budget ? Refusal::kBudget : Refusal::kQuota;
    return charge.status();
  }
  if (Status mapped = pool->Restore(const_cast<void*>(ptr)); !mapped.ok()) {
    *refusal = mapped.code() == StatusCode::kResourceExhausted ? Refusal::kDevice : Refusal::kNone;
    return Status(mapped.code(),
                  fmt::format("{} {}", mapped.message(), DescribeDevice(p.device)));
  }
  *refusal = Refusal::kNone;
  return charge;
}

Status Allocator::Unpark(OwnerId owner) {
  std::vector<const void*> mine;
  {
    MutexLock lock(park_mu_);
    for (const auto& [ptr, p] : parked_) {
      if (p.parked_by == owner) mine.push_back(ptr);
    }
  }
  // Each allocation is mapped, then its copy back is queued while the next one is mapped: the
  // driver's mapping calls (one per granule) overlap the copies, which are waited for once.
  struct Restoring {
    const void* ptr;
    Parked parked;
    Ledger::PendingCharge charge;
  };
  std::vector<Restoring> queued;
  Status failed;
  for (const void* ptr : mine) {
    Parked p;
    if (!TakeParked(ptr, &p)) continue;  // freed meanwhile
    Refusal refusal = Refusal::kNone;
    Result<Ledger::PendingCharge> charge = TryMapAgain(ptr, p, &refusal);
    if (!charge.ok() && relief_depth > 0 && !in_relief) {
      charge = RetryUnderRelief(p.device, p.size, p.owner, refusal, std::move(charge),
                                [&](Refusal* r) { return TryMapAgain(ptr, p, r); });
    }
    Status copied = charge.ok() ? QueueCopy(p.device, const_cast<void*>(ptr), p.copy.device(),
                                            p.copy.data(), p.size, nullptr)
                                : charge.status();
    if (!copied.ok()) {
      failed = Status(copied.code(), fmt::format("waking {} at {}: {}", FormatBytes(p.size), ptr,
                                                 copied.message()));
      MutexLock lock(park_mu_);
      parked_.emplace(ptr, std::move(p));  // mapped or not, a later Unpark finishes it
      parked_count_.store(parked_.size(), std::memory_order_release);
      break;
    }
    queued.push_back({ptr, std::move(p), std::move(*charge)});
  }
  std::vector<Device> devices;
  for (const Restoring& r : queued) {
    if (r.parked.device.is_cuda() &&
        std::find(devices.begin(), devices.end(), r.parked.device) == devices.end()) {
      devices.push_back(r.parked.device);
    }
  }
  Status waited;
  for (Device d : devices) {
    if (Status s = SynchronizeStream(d.index, nullptr); !s.ok() && waited.ok()) waited = s;
  }
  if (!waited.ok()) {
    // The copies' outcome is unknown: everything stays parked, to be copied again.
    MutexLock lock(park_mu_);
    for (Restoring& r : queued) parked_.emplace(r.ptr, std::move(r.parked));
    parked_count_.store(parked_.size(), std::memory_order_release);
    return Status(waited.code(), "waking: " + waited.message());
  }
  for (Restoring& r : queued) ledger_->Commit(std::move(r.charge), r.ptr);
  return failed;  // the copies (host memory) go with `queued`
}

size_t Allocator::ParkedBytes(OwnerId owner) const {
  MutexLock lock(park_mu_);
  size_t bytes = 0;
  for (const auto& [ptr, p] : parked_) {
    if (p.parked_by == owner) bytes += p.size;
  }
  return bytes;
}

size_t Allocator::Trim(Device device) {
  auto pool = Pool(device);
  return pool.ok() ? (*pool)->Trim() : 0;
}

size_t Allocator::TrimAll() {
  std::vector<CachingPool*> pools;
  {
    MutexLock lock(mu_);
    for (auto& [key, pool] : pools_) pools.push_back(pool.get());
  }
  size_t released = 0;
  for (CachingPool* p : pools) released += p->Trim();
  return released;
}

std::vector<PoolStats> Allocator::PoolStatistics() const {
  std::vector<CachingPool*> pools;
  {
    MutexLock lock(mu_);
    for (auto& [key, pool] : pools_) pools.push_back(pool.get());
  }
  std::vector<PoolStats> stats;
  for (CachingPool* p : pools) stats.push_back(p->Stats());
  return stats;
}

}  // namespace vramd::memory
