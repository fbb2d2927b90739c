#include "memory/allocator.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>
#include <vector>

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

Result<std::unique_ptr<SegmentSource>> MakeSource(Device device) {
  switch (device.type) {
    case DeviceType::kCpu: return MakeHostSegmentSource();
    case DeviceType::kCuda: return MakeCudaSegmentSource(device.index);
    case DeviceType::kCudaHost: return MakeCudaHostSegmentSource();
  }
  return Status::InvalidArgument(
      fmt::format("no memory source for device type {}", static_cast<int>(device.type)));
}

// How many holders an out-of-memory message names.
constexpr size_t kHoldersNamed = 5;

}  // namespace

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

Allocator::~Allocator() = default;

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
  VRAMD_ASSIGN_OR_RETURN(std::unique_ptr<SegmentSource> source, MakeSource(device));
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
  const OwnerId asking = owner != kNoOwner ? owner : OwnerScope::Current();
  MutexLock lock(relief_mu_);
  // Sleeping another model frees what counts against the budget and what the device has; a
  // model's own quota it cannot relieve.
  while (relief_ != nullptr && !made.ok() &&
         (refusal == Refusal::kBudget || refusal == Refusal::kDevice)) {
    in_relief = true;
    const bool relieved = relief_->Relieve(device, size, asking);
    in_relief = false;
    if (!relieved) break;
    made = TryAllocate(pool, device, size, stream, owner, &refusal);
  }
  return made;
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
  ledger_->RecordFree(ptr);
  auto pool = Pool(device);
  if (pool.ok()) (*pool)->Free(ptr);
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
