#include "ledger_allocators.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <algorithm>
#include <cstddef>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#if defined(VRAMD_TORCH_CUDA)
#include <cuda_runtime_api.h>
#if __has_include(<torch/csrc/cuda/CUDAPluggableAllocator.h>)
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>
#define VRAMD_TORCH_PLUGGABLE 1
#endif
#endif

namespace vramd::pytorch {
namespace {

thread_local const ChargeScope* t_scope = nullptr;

struct Allocation {
  std::shared_ptr<ServerLink> link;
  VramdDeviceKind kind = VRAMD_DEVICE_CPU;
  int32_t device = -1;
  size_t size = 0;
  VramdOwner owner = 0;  // charged to; 0: the thread's own owner in vramd (no scope)
};

// Every live ledger allocation, in shards by address, and every live link. Executions on many
// instances allocate and free at once (a forward() makes dozens of each), so no lock here is
// shared by all of them or held while vramd's side of a call runs: a shard's lock covers its
// map only, and a link's own lock (ServerLink::WithApi) keeps its table valid during a call.
constexpr size_t kShardBits = 6;
struct AllocationShard {
  std::mutex mu;
  std::unordered_map<void*, Allocation> allocations;  // guarded by mu
};
struct Registry {
  std::array<AllocationShard, size_t{1} << kShardBits> shards;
  std::shared_mutex links_mu;
  std::vector<std::weak_ptr<ServerLink>> links;  // guarded by links_mu
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: LibTorch frees during static teardown
  return *r;
}

AllocationShard& ShardOf(const void* ptr) {
  // Allocations are at least 256-byte aligned; a multiplicative hash spreads the higher bits.
  const uint64_t key = reinterpret_cast<uintptr_t>(ptr) >> 8;
  return registry().shards[(key * 0x9E3779B97F4A7C15ull) >> (64 - kShardBits)];
}

// The live links other than `except`, for allocations outside a scope and for frees whose own
// link has closed.
std::vector<std::shared_ptr<ServerLink>> OtherLiveLinks(const ServerLink* except) {
  std::vector<std::shared_ptr<ServerLink>> out;
  std::shared_lock lock(registry().links_mu);
  for (const auto& weak : registry().links) {
    auto link = weak.lock();
    if (link && link.get() != except && link->live()) out.push_back(std::move(link));
  }
  return out;
}

// VRAMD_PYTORCH_TRACE_ALLOCATIONS=<file>: the first kTraceLimit allocations and frees, one line
// each ("A|F <ptr> <bytes> <cpu|gpu> <device> <stream> <owner>"), for replaying LibTorch's
// pattern against vramd's pool (bench/pool_replay.cc).
constexpr long kTraceLimit = 200000;
struct Trace {
  std::FILE* file = nullptr;  // set once, before any event
  std::mutex mu;
  long events = 0;  // guarded by mu
};
Trace& trace() {
  static Trace* t = [] {
    auto* made = new Trace;  // never destroyed, as the registry
    if (const char* path = std::getenv("VRAMD_PYTORCH_TRACE_ALLOCATIONS")) {
      made->file = std::fopen(path, "w");
    }
    return made;
  }();
  return *t;
}
void TraceEvent(char op, void* ptr, const Allocation& a, void* stream, VramdOwner owner) {
  Trace& t = trace();
  if (t.file == nullptr) return;
  std::lock_guard lock(t.mu);
  if (t.events >= kTraceLimit) return;
  std::fprintf(t.file, "%c %p %zu %s %d %p %llu\n", op, ptr, a.size,
               a.kind == VRAMD_DEVICE_GPU ? "gpu" : "cpu", a.device, stream,
               static_cast<unsigned long long>(owner));
  if (++t.events == kTraceLimit) std::fflush(t.file);
}

// Takes `size` bytes from vramd for the calling thread's charge. Null with `error` set on
// failure or when no model is there to charge.
void* AllocateFromVramd(VramdDeviceKind kind, int32_t device, size_t size, void* stream,
                        std::string* error) {
  std::shared_ptr<ServerLink> link;
  VramdOwner owner = 0;  // 0: vramd charges the thread's own current owner
  VramdCode code = VRAMD_OK;
  VramdError err{};
  void* ptr = nullptr;
  auto allocate = [&](const VramdServerApi* api) {
    code = api->allocate(api->server, owner, kind, device, size, stream, &ptr, &err);
  };
  bool called = false;
  if (t_scope != nullptr) {
    link = t_scope->link();
    owner = t_scope->owner();
    called = link->WithApi(allocate);
  } else {
    for (auto& other : OtherLiveLinks(nullptr)) {
      if ((called = other->WithApi(allocate))) {
        link = std::move(other);
        break;
      }
    }
  }
  if (!called) {
    *error = "no vramd model is loading or executing on this thread to charge it to";
    return nullptr;
  }
  if (code != VRAMD_OK || ptr == nullptr) {
    *error = std::string(err.message, strnlen(err.message, sizeof err.message));
    return nullptr;
  }
  AllocationShard& shard = ShardOf(ptr);
  std::lock_guard lock(shard.mu);
  const Allocation& a = shard.allocations[ptr] =
      Allocation{std::move(link), kind, device, size, owner};
  TraceEvent('A', ptr, a, stream, owner);
  return ptr;
}

// LibTorch's CPU allocator from before ours, for CPU allocations no model can be charged for.
c10::Allocator* g_previous_cpu = nullptr;

void FreeCpu(void* ptr) {
  if (ptr == nullptr) return;
  // Not ours: made by the previous allocator while no model was there.
  if (!FreeLedgerAllocation(ptr)) g_previous_cpu->raw_deleter()(ptr);
}

c10::DataPtr AllocateCpu(size_t n) {
  const c10::Device cpu(c10::DeviceType::CPU);
  if (n == 0) return c10::DataPtr(nullptr, nullptr, &FreeCpu, cpu);
  std::string error;
  if (void* ptr = AllocateFromVramd(VRAMD_DEVICE_CPU, -1, n, nullptr, &error)) {
    return c10::DataPtr(ptr, ptr, &FreeCpu, cpu);
  }
  if (t_scope == nullptr) {
    // Nobody to charge: LibTorch's own allocator, as if vramd were not there.
    void* ptr = g_previous_cpu->raw_allocate(n);
    return c10::DataPtr(ptr, ptr, &FreeCpu, cpu);
  }
  TORCH_CHECK(false, "vramd could not allocate ", n, " bytes of host memory: ", error);
}

// Both spellings of allocate(): const before LibTorch 2.3, not const since.
class LedgerCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) const { return AllocateCpu(n); }
  c10::DataPtr allocate(size_t n) { return AllocateCpu(n); }
  c10::DeleterFnPtr raw_deleter() const override { return &FreeCpu; }
  void copy_data(void* dest, const void* src, std::size_t count) const {
    std::memcpy(dest, src, count);
  }
};

#if defined(VRAMD_TORCH_PLUGGABLE)
std::string InstallCudaAllocator() {
  auto allocator = torch::cuda::CUDAPluggableAllocator::createCustomAllocator(
      [](size_t size, auto device, cudaStream_t stream) -> void* {
        if (size == 0) return nullptr;
        std::string error;
        void* ptr = AllocateFromVramd(VRAMD_DEVICE_GPU, static_cast<int32_t>(device), size,
                                      stream, &error);
        TORCH_CHECK_WITH(OutOfMemoryError, ptr != nullptr, "vramd could not allocate ", size,
                         " bytes on cuda:", static_cast<int>(device), ": ", error);
        return ptr;
      },
      [](void* ptr, size_t, auto, cudaStream_t) { FreeLedgerAllocation(ptr); });
  try {
    torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(allocator);
  } catch (const c10::Error& e) {
    return std::string("LibTorch's GPU memory stays outside vramd's ledger: ") +
           e.what_without_backtrace();
  }
  return "";
}
#endif

}  // namespace

ServerLink::ServerLink(const VramdServerApi* api, std::string model_name)
    : api_(api), model_name_(std::move(model_name)) {}

void ServerLink::Close() {
  std::unique_lock lock(mu_);
  live_ = false;
}

ChargeScope::ChargeScope(std::shared_ptr<ServerLink> link, VramdOwner owner)
    : link_(std::move(link)), owner_(owner), outer_(t_scope) {
  t_scope = this;
}

ChargeScope::~ChargeScope() { t_scope = outer_; }

void AddLiveLink(const std::shared_ptr<ServerLink>& link) {
  std::unique_lock lock(registry().links_mu);
  auto& links = registry().links;
  links.erase(std::remove_if(links.begin(), links.end(),
                             [](const std::weak_ptr<ServerLink>& w) { return w.expired(); }),
              links.end());
  links.push_back(link);
}

void RemoveLiveLink(const ServerLink* link) {
  std::unique_lock lock(registry().links_mu);
  auto& links = registry().links;
  links.erase(std::remove_if(links.begin(), links.end(),
                             [&](const std::weak_ptr<ServerLink>& w) {
                               auto l = w.lock();
                               return !l || l.get() == link;
                             }),
              links.end());
}

LiveUsage LiveUsageOf(const ServerLink* link) {
  LiveUsage usage;
  for (AllocationShard& shard : registry().shards) {
    std::lock_guard lock(shard.mu);
    for (const auto& [ptr, a] : shard.allocations) {
      if (a.link.get() != link) continue;
      ++usage.allocations;
      usage.bytes += a.size;
    }
  }
  return usage;
}

size_t RechargeLeftovers(const ServerLink* link, VramdOwner from, VramdOwner to) {
  if (from == 0 || from == to) return 0;
  std::vector<void*> left;
  for (AllocationShard& shard : registry().shards) {
    std::lock_guard lock(shard.mu);
    for (const auto& [ptr, a] : shard.allocations) {
      if (a.link.get() == link && a.owner == from) left.push_back(ptr);
    }
  }
  size_t moved = 0;
  for (void* ptr : left) {
    VramdCode code = VRAMD_UNSUPPORTED;
    link->WithApi([&](const VramdServerApi* api) {
      // An older server's table ends before recharge.
      if (api->struct_size <= offsetof(VramdServerApi, recharge) || api->recharge == nullptr) {
        return;
      }
      VramdError error{};
      code = api->recharge(api->server, ptr, to, &error);
    });
    if (code != VRAMD_OK) continue;  // freed meanwhile, or nothing to recharge with
    AllocationShard& shard = ShardOf(ptr);
    std::lock_guard lock(shard.mu);
    if (auto it = shard.allocations.find(ptr); it != shard.allocations.end() && it->second.owner == from) {
      it->second.owner = to;
      ++moved;
    }
  }
  return moved;
}

bool FreeLedgerAllocation(void* ptr) {
  if (ptr == nullptr) return true;
  Allocation a;
  {
    AllocationShard& shard = ShardOf(ptr);
    std::lock_guard lock(shard.mu);
    auto it = shard.allocations.find(ptr);
    if (it == shard.allocations.end()) return false;
    a = std::move(it->second);
    shard.allocations.erase(it);
    TraceEvent('F', ptr, a, nullptr, 0);
  }
  auto free = [&](const VramdServerApi* api) { api->free(api->server, a.kind, a.device, ptr); };
  if (a.link->WithApi(free)) return true;
  // Its model is gone: through another live model's table, and vramd's ledger reports it at
  // its owner. With none left it stays allocated.
  for (const auto& other : OtherLiveLinks(a.link.get())) {
    if (other->WithApi(free)) break;
  }
  return true;
}

const std::string& InstallLedgerAllocators() {
  static const std::string warning = []() -> std::string {
    // For measuring what the ledger costs: the same backend with LibTorch's own allocators.
    if (const char* env = std::getenv("VRAMD_PYTORCH_LEDGER_ALLOCATORS");
        env != nullptr && std::string(env) == "0") {
      return "VRAMD_PYTORCH_LEDGER_ALLOCATORS=0: LibTorch's memory stays outside vramd's ledger";
    }
    g_previous_cpu = c10::GetCPUAllocator();
    static LedgerCpuAllocator cpu;
    // Priority above LibTorch's default so a later default registration cannot replace it.
    c10::SetCPUAllocator(&cpu, /*priority=*/1);
#if defined(VRAMD_TORCH_PLUGGABLE)
    return InstallCudaAllocator();
#elif defined(VRAMD_TORCH_CUDA)
    return std::string(
        "this LibTorch has no pluggable CUDA allocator: its GPU memory stays outside vramd's "
        "ledger");
#else
    return std::string();
#endif
  }();
  return warning;
}

}  // namespace vramd::pytorch
