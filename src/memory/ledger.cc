// Ledger design.
//
// Data
//   OwnerNode  One per owner in the tree. Its figures are atomics, so that the hot path never
//              takes a tree-wide lock. `state` packs the live allocation count with the closed
//              bit: state = 2 * live_count + closed. One atomic word therefore answers both
//              "may this owner still be charged?" (an allocation pins an open owner with a CAS
//              that fails once the bit is set) and "has this closed owner just emptied?" (the
//              free whose fetch_sub turns 3 into 1 is the one that drops it).
//   Record     One per live allocation, in one of kShards record shards (a mutex and an
//              unordered_map) picked by a hash of the address. It points at its OwnerNode, so a
//              free reaches the owner's counters without looking the owner up.
//   index      kShards owner shards (a mutex and an unordered_map id -> node) picked by id; the
//              allocation path resolves an OwnerId there. The root is reached without it.
//   tree       Parent and sibling links (an intrusive list, O(1) unlink), changed only under
//              tree_mu_, as are all opens, closes and node deletions.
//
// Lock order: tree_mu_ > owner shard mutex > record shard mutex. history_mu_ and callback_mu_
//   are leaves, taken with nothing else held. The leak callback and symbolization run with no
//   lock held. Hot path: RecordAllocation holds one owner shard (none for the root), releases
//   it, then holds one record shard; RecordFree holds one record shard. Both take tree_mu_ only
//   on rare paths (charging a closed owner; the free that empties a closed owner).
//   What the compiler checks (clang -Wthread-safety, core/thread_annotations.h): that a shard's
//   map, the leak history and the callback are touched only under their mutex; that the
//   ...Locked helpers run under tree_mu_ (REQUIRES) and the functions that take tree_mu_
//   themselves do not (EXCLUDES). What it does not: this order (clang checks orders only in its
//   beta, and Impl cannot name a shard's mutex), which ledger_tsan_test's ThreadSanitizer run
//   watches instead; and the OwnerNode tree links, guarded by tree_mu_ but fields of another
//   struct, which only functions that REQUIRE tree_mu_ touch.
//
// Node lifetime. A node is deleted, under tree_mu_ and its owner shard's mutex, only when it is
//   closed, holds no allocation (state == 1) and has no children. Code that reaches a node
//   without tree_mu_ holds it pinned: the allocation path keeps the owner shard's mutex from
//   the lookup until its CAS has counted the new allocation; a record counts one until its
//   free subtracts it, which is the free's last access to the node.
//
// Invariant: an open owner has only open ancestors (CloseOwner closes whole subtrees, and
//   OpenOwner attaches under the nearest open ancestor). So the charges and new children of a
//   closed owner go to that ancestor, and closing a subtree never deletes a node it has not
//   visited yet.
//
// Quotas (memory/quota.h). A QuotaState holds one quota's limits and its use per device slot,
//   and points at the quota enclosing it (the root's budget, Options::budget, encloses all):
//   a chain a few long. The owner opened with a quota and every node opened below it point at
//   its state (shared, set before the node is published in its shard, constant after), so the
//   hot path reaches the chain from the node it already holds: one null check when there is
//   none. A charge counts against every quota in the chain of the node it lands on, and the
//   release of a record against the same node's, so each quota's use equals what its subtree
//   holds, recharges included. Charge checks each limit with a CAS under the owner shard's
//   mutex, before pinning, and undoes the quotas it passed when a later one refuses, so a
//   refused allocation leaves no trace (not even in the peak). A refusal reads the paths it
//   names after, under tree_mu_.
//
// Memory. A clean close deletes the node at once, so request churn does not grow the ledger.
//   A leaking owner stays until its last allocation is freed. Leak history keeps the last
//   kMaxLeakHistory reports with at most kMaxLeakAllocations allocations each, and keeps raw
//   return addresses (8 bytes a frame) rather than names: Leaks() names them again.
#include "memory/ledger.h"

#include <time.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <deque>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>

#include "core/mutex.h"
#include "memory/backtrace.h"
#include "memory/caching_pool.h"

namespace vramd::memory {

std::string_view OwnerKindName(OwnerKind kind) {
  switch (kind) {
    case OwnerKind::kServer: return "server";
    case OwnerKind::kModel: return "model";
    case OwnerKind::kVersion: return "version";
    case OwnerKind::kInstance: return "instance";
    case OwnerKind::kRequest: return "request";
    case OwnerKind::kScope: return "scope";
    case OwnerKind::kSequence: return "sequence";
    case OwnerKind::kBackend: return "backend";
  }
  return "unknown";
}

namespace {

constexpr int kShards = 64;
constexpr size_t kMaxLeakHistory = 1000;
constexpr size_t kMaxLeakAllocations = 16;
// Per-device slots: cpu, cuda:0..15, one shared by every other CUDA ordinal, and cuda_host.
constexpr int kCudaSlots = 16;
constexpr int kCudaOverflowSlot = 1 + kCudaSlots;
constexpr int kCudaHostSlot = kCudaOverflowSlot + 1;
constexpr int kDeviceSlots = kCudaHostSlot + 1;

// Every CUDA slot, for a limit on each GPU.
constexpr int kFirstCudaSlot = 1;
constexpr int kLastCudaSlot = kCudaOverflowSlot;

int DeviceSlot(Device device) {
  switch (device.type) {
    case DeviceType::kCpu: return 0;
    case DeviceType::kCudaHost: return kCudaHostSlot;
    case DeviceType::kCuda:
      if (device.index >= 0 && device.index < kCudaSlots) return 1 + device.index;
      return kCudaOverflowSlot;
  }
  return 0;
}

Device SlotDevice(int slot) {
  if (slot == 0) return Device::Cpu();
  if (slot == kCudaHostSlot) return Device::CudaHost();
  return Device::Cuda(slot - 1);  // the overflow slot reads as cuda:16
}

// Owner ids are unique in the process, across ledgers, and never reused.
std::atomic<OwnerId> g_next_owner_id{1};
thread_local OwnerId t_current_owner = kNoOwner;
thread_local LazyOwner* t_current_lazy = nullptr;  // takes precedence over t_current_owner

// A coarse clock (a few ms of resolution) costs ~5 ns where system_clock::now() costs ~20.
int64_t NowNanos() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

std::chrono::system_clock::time_point ToTimePoint(int64_t nanos) {
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::nanoseconds(nanos)));
}

void RaiseToAtLeast(std::atomic<int64_t>& peak, int64_t value) {
  int64_t current = peak.load(std::memory_order_relaxed);
  while (current < value &&
         !peak.compare_exchange_weak(current, value, std::memory_order_relaxed)) {
  }
}

struct QuotaState {
  QuotaState(OwnerId o, MemoryQuota q, std::shared_ptr<QuotaState> p)
      : owner(o), spec(std::move(q)), parent(std::move(p)) {
    for (const QuotaLimit& l : spec) {
      if (l.device.is_cuda() && l.device.index == kEveryGpu) {
        for (int slot = kFirstCudaSlot; slot <= kLastCudaSlot; ++slot) {
          if (limit[slot] == 0) limit[slot] = l.bytes;
        }
      }
    }
    for (const QuotaLimit& l : spec) {  // a named device wins over "each GPU"
      if (!(l.device.is_cuda() && l.device.index == kEveryGpu)) {
        limit[DeviceSlot(l.device)] = l.bytes;
      }
    }
  }
  // Constant after construction.
  const OwnerId owner;
  const MemoryQuota spec;
  const std::shared_ptr<QuotaState> parent;  // the enclosing quota; null for the outermost
  std::array<int64_t, kDeviceSlots> limit{};  // 0: none on that slot

  std::array<std::atomic<int64_t>, kDeviceSlots> used{};
  std::array<std::atomic<uint64_t>, kDeviceSlots> refusals{};
  // MarkPeaks: `used` then, and the most `used` has been since.
  std::array<std::atomic<int64_t>, kDeviceSlots> mark{};
  std::array<std::atomic<int64_t>, kDeviceSlots> peak{};

  // LearnExecutionPeaks: (slot, batch size) -> the largest rise an execution made.
  Mutex learned_mu;
  std::map<std::pair<int, int64_t>, int64_t> learned GUARDED_BY(learned_mu);
};

// The owning pointer to `which`, a state in the chain that starts at `first`.
std::shared_ptr<QuotaState> QuotaInChain(std::shared_ptr<QuotaState> first,
                                         const QuotaState* which) {
  while (first != nullptr && first.get() != which) first = first->parent;
  return first;
}

struct OwnerNode {
  OwnerNode(OwnerId i, OwnerKind k, std::string n) : id(i), kind(k), name(std::move(n)) {}

  // Constant after construction.
  const OwnerId id;
  const OwnerKind kind;
  const std::string name;

  // Set before the node is published; constant after. Null: no quota bounds it.
  std::shared_ptr<QuotaState> quota;

  // Guarded by Ledger::Impl::tree_mu_ (see the lock note above: not checked).
  OwnerNode* parent = nullptr;
  OwnerNode* first_child = nullptr;
  OwnerNode* last_child = nullptr;
  OwnerNode* prev_sibling = nullptr;
  OwnerNode* next_sibling = nullptr;

  // Atomic. The closed bit is set only with tree_mu_ and the owner shard's mutex held.
  alignas(64) std::atomic<int64_t> state{0};  // 2 * live_count + closed
  std::atomic<int64_t> live_bytes{0};
  std::atomic<int64_t> peak_bytes{0};
  std::atomic<int64_t> total_bytes{0};
  std::atomic<int64_t> total_count{0};
  std::array<std::atomic<int64_t>, kDeviceSlots> device_bytes{};

  bool closed() const { return state.load(std::memory_order_acquire) & 1; }
  int64_t live_count() const { return state.load(std::memory_order_acquire) >> 1; }
};

struct Record {
  OwnerNode* owner;
  size_t size;
  Device device;
  int64_t time_ns;
  Backtrace trace;  // empty when untraced
};

struct alignas(64) RecordShard {
  Mutex mu;
  std::unordered_map<uintptr_t, Record> records GUARDED_BY(mu);
};

struct alignas(64) OwnerShard {
  Mutex mu;
  std::unordered_map<OwnerId, OwnerNode*> owners GUARDED_BY(mu);
};

// A leak report with raw traces, parallel to report.allocations (whose backtraces are empty).
struct FiledLeak {
  LeakReport report;
  std::vector<Backtrace> traces;
};

struct PendingLeak {
  OwnerNode* node;  // alive while tree_mu_ is held
  FiledLeak leak;
};

OwnerStats StatsOf(const OwnerNode& node) {
  OwnerStats s;
  s.live_bytes = node.live_bytes.load(std::memory_order_relaxed);
  s.live_count = node.live_count();
  s.peak_bytes = node.peak_bytes.load(std::memory_order_relaxed);
  s.total_allocated_bytes = node.total_bytes.load(std::memory_order_relaxed);
  s.total_allocations = node.total_count.load(std::memory_order_relaxed);
  return s;
}

}  // namespace

class Ledger::Impl {
 public:
  explicit Impl(Options options);
  ~Impl();

  OwnerId root() const { return root_->id; }
  OwnerId OpenOwner(OwnerId parent, OwnerKind kind, std::string name, MemoryQuota quota)
      EXCLUDES(tree_mu_);
  std::vector<LeakReport> CloseOwner(OwnerId owner) EXCLUDES(tree_mu_);
  void RecordAllocation(const void* ptr, size_t size, Device device, OwnerId owner,
                        const void* caller) EXCLUDES(tree_mu_);
  Result<PendingCharge> Charge(Device device, size_t size, OwnerId owner, bool* by_budget)
      EXCLUDES(tree_mu_);
  void Commit(OwnerNode* node, size_t size, Device device, const void* ptr, const void* caller)
      EXCLUDES(tree_mu_);
  // Undoes a charge that was never committed.
  void Undo(OwnerNode* node, size_t size, Device device) EXCLUDES(tree_mu_);
  void MarkPeaks(OwnerId owner) EXCLUDES(tree_mu_);
  void LearnExecutionPeaks(OwnerId measured, OwnerId learner, int64_t batch_size, Device device)
      EXCLUDES(tree_mu_);
  int64_t PredictExecutionPeak(OwnerId learner, Device device, int64_t batch_size,
                               bool scale = true) const EXCLUDES(tree_mu_);
  std::pair<int64_t, int64_t> BudgetOf(Device device) const;
  int64_t MadeSinceMark(OwnerId owner, Device device) const;
  OwnerId RecordFree(const void* ptr) EXCLUDES(tree_mu_);
  Status Recharge(const void* ptr, OwnerId owner) EXCLUDES(tree_mu_);
  bool Knows(const void* ptr);
  Result<OwnerStats> Stats(OwnerId owner) const;
  Result<int64_t> SubtreeLiveBytes(OwnerId owner) const EXCLUDES(tree_mu_);
  Result<std::vector<Ledger::LiveAllocation>> LiveAllocationsBelow(OwnerId owner, Device device)
      EXCLUDES(tree_mu_);
  std::string OwnerPath(OwnerId owner) const EXCLUDES(tree_mu_);
  std::vector<OwnerSnapshot> Snapshot() const EXCLUDES(tree_mu_);
  std::vector<LeakReport> Leaks() const EXCLUDES(history_mu_);

  uint64_t leaked_bytes_total() const { return leaked_bytes_.load(std::memory_order_relaxed); }
  uint64_t leak_reports_total() const { return leak_reports_.load(std::memory_order_relaxed); }
  uint64_t unknown_frees() const { return unknown_frees_.load(std::memory_order_relaxed); }
  uint64_t quota_refusals_total() const {
    return quota_refusals_.load(std::memory_order_relaxed);
  }
  void set_trace(bool on);
  bool trace() const { return trace_.load(std::memory_order_relaxed); }
  void SetLeakCallback(std::function<void(const LeakReport&)> callback) EXCLUDES(callback_mu_);

 private:
  OwnerShard& OwnerShardFor(OwnerId id) const { return owner_shards_[id % kShards]; }
  RecordShard& RecordShardFor(uintptr_t address) {
    // Allocation addresses are aligned; a multiplicative hash spreads their high bits.
    return record_shards_[((address >> 4) * 0x9E3779B97F4A7C15ull) >> 58];
  }

  // Pins the owner that `id` resolves to and charges it; returns it. Takes the owner shard's
  // mutex, or tree_mu_ when that owner is closed or gone. `count` false: live bytes only, not
  // the totals (a recharge, not an allocation, or a charge not yet committed). `enforce`: the
  // quota bounding that owner may refuse, and then nothing is charged or pinned, the result is
  // null and *refused_by names the quota.
  OwnerNode* PinAndCharge(OwnerId id, size_t size, int slot, bool count = true,
                          bool enforce = false,
                          std::shared_ptr<QuotaState>* refused_by = nullptr) EXCLUDES(tree_mu_);
  // Undoes a record's charges; returns its owner's id. May take tree_mu_ (REQUIRES: no lock).
  OwnerId Release(const Record& record) EXCLUDES(tree_mu_);
  // Drops `id` if it is closed, empty and childless, then its ancestors likewise. Takes tree_mu_.
  void DropIfDone(OwnerId id) EXCLUDES(tree_mu_);

  // nullptr when absent; takes the owner shard.
  OwnerNode* FindLocked(OwnerId id) const REQUIRES(tree_mu_);
  // The quota `id` opened with itself (null for none, or for an unknown owner); takes the
  // owner shard.
  std::shared_ptr<QuotaState> OwnQuota(OwnerId id) const;
  void DropIfDoneLocked(OwnerNode* node) REQUIRES(tree_mu_);
  std::string PathLocked(const OwnerNode* node) const REQUIRES(tree_mu_);
  // Fills each pending leak's largest allocations; takes each record shard in turn.
  void CollectLeakedAllocationsLocked(std::vector<PendingLeak>& pending) REQUIRES(tree_mu_);
  // Adds `child` as the last child of `parent`; takes `node` out of its parent's children.
  void LinkLocked(OwnerNode* parent, OwnerNode* child) REQUIRES(tree_mu_);
  void UnlinkLocked(OwnerNode* node) REQUIRES(tree_mu_);

  // With no lock held: files the reports, names their frames, runs the callback.
  std::vector<LeakReport> File(std::vector<PendingLeak> pending)
      EXCLUDES(tree_mu_, history_mu_, callback_mu_);
  int64_t LiveBytesOf(OwnerId id) const;

  // Constant after construction.
  const int max_frames_;
  OwnerNode* root_ = nullptr;

  std::atomic<bool> trace_;
  std::atomic<uint64_t> leaked_bytes_{0};
  std::atomic<uint64_t> leak_reports_{0};
  std::atomic<uint64_t> unknown_frees_{0};
  std::atomic<uint64_t> quota_refusals_{0};

  // Serializes opens, closes and node deletion; guards the tree links of every node.
  mutable Mutex tree_mu_;
  mutable std::array<OwnerShard, kShards> owner_shards_;
  std::array<RecordShard, kShards> record_shards_;

  mutable Mutex history_mu_;
  std::deque<FiledLeak> history_ GUARDED_BY(history_mu_);  // at most kMaxLeakHistory

  Mutex callback_mu_;
  std::function<void(const LeakReport&)> callback_ GUARDED_BY(callback_mu_);
};

Ledger::Impl::Impl(Options options)
    : max_frames_(std::clamp(options.max_frames, 0, Backtrace::kMaxFrames)),
      trace_(options.trace) {
  root_ = new OwnerNode(g_next_owner_id.fetch_add(1), OwnerKind::kServer, "server");
  if (!options.budget.empty()) {
    root_->quota = std::make_shared<QuotaState>(root_->id, std::move(options.budget), nullptr);
  }
  OwnerShardFor(root_->id).owners.emplace(root_->id, root_);
  set_trace(options.trace);
}

Ledger::Impl::~Impl() {
  for (OwnerShard& shard : owner_shards_) {
    for (auto& [id, node] : shard.owners) delete node;
  }
}

void Ledger::Impl::set_trace(bool on) {
  // glibc loads libgcc_s on the first backtrace() of a process: do it here, not on a hot path.
  if (on) (void)Backtrace::Capture(1);
  trace_.store(on, std::memory_order_relaxed);
}

void Ledger::Impl::SetLeakCallback(std::function<void(const LeakReport&)> callback) {
  MutexLock lock(callback_mu_);
  callback_ = std::move(callback);
}

OwnerId Ledger::Impl::OpenOwner(OwnerId parent_id, OwnerKind kind, std::string name,
                                MemoryQuota quota) {
  const OwnerId id = g_next_owner_id.fetch_add(1, std::memory_order_relaxed);
  auto* node = new OwnerNode(id, kind, std::move(name));
  MutexLock tree(tree_mu_);
  OwnerNode* parent = parent_id == kNoOwner ? root_ : FindLocked(parent_id);
  if (parent == nullptr) parent = root_;
  while (parent->closed()) parent = parent->parent;  // the root never closes
  node->quota = quota.empty() ? parent->quota
                              : std::make_shared<QuotaState>(id, std::move(quota), parent->quota);
  LinkLocked(parent, node);
  OwnerShard& shard = OwnerShardFor(id);
  MutexLock lock(shard.mu);
  shard.owners.emplace(id, node);
  return id;
}

std::vector<LeakReport> Ledger::Impl::CloseOwner(OwnerId id) {
  std::vector<PendingLeak> pending;
  {
    MutexLock tree(tree_mu_);
    OwnerNode* top = FindLocked(id);
    if (top == nullptr || top == root_ || top->closed()) return {};

    // Post-order: every node after its descendants.
    std::vector<OwnerNode*> order;
    std::vector<std::pair<OwnerNode*, bool>> stack{{top, false}};
    while (!stack.empty()) {
      auto [node, expanded] = stack.back();
      stack.pop_back();
      if (expanded) {
        order.push_back(node);
        continue;
      }
      stack.emplace_back(node, true);
      for (OwnerNode* c = node->last_child; c != nullptr; c = c->prev_sibling) {
        stack.emplace_back(c, false);
      }
    }

    const auto closed_at = std::chrono::system_clock::now();
    for (OwnerNode* node : order) {
      if (node->closed()) continue;  // closed earlier with leaks; reported then
      int64_t before;
      int64_t bytes;
      {
        OwnerShard& shard = OwnerShardFor(node->id);
        MutexLock lock(shard.mu);
        before = node->state.fetch_or(1, std::memory_order_acq_rel);
        bytes = node->live_bytes.load(std::memory_order_relaxed);
      }
      if ((before >> 1) == 0) {
        // Clean. Its parent is open, so only this node can go; visited nodes stay valid.
        DropIfDoneLocked(node);
        continue;
      }
      PendingLeak leak{node, {}};
      LeakReport& r = leak.leak.report;
      r.owner = node->id;
      r.kind = node->kind;
      r.owner_path = PathLocked(node);
      r.closed_at = closed_at;
      r.bytes = static_cast<size_t>(std::max<int64_t>(bytes, 0));
      r.count = static_cast<size_t>(before >> 1);
      r.still_live_bytes = r.bytes;
      pending.push_back(std::move(leak));
    }
    if (!pending.empty()) CollectLeakedAllocationsLocked(pending);
  }
  return File(std::move(pending));
}

void Ledger::Impl::CollectLeakedAllocationsLocked(std::vector<PendingLeak>& pending) {
  struct Candidate {
    AllocationInfo info;
    Backtrace trace;
  };
  // Min-heaps by size, so the smallest of the kept ones is the first to go.
  auto larger = [](const Candidate& a, const Candidate& b) { return a.info.size > b.info.size; };
  std::vector<std::vector<Candidate>> heaps(pending.size());
  std::unordered_map<const OwnerNode*, size_t> which;
  for (size_t i = 0; i < pending.size(); ++i) which.emplace(pending[i].node, i);

  // A scan of every live record: the cost of a leak, never of a clean close.
  for (RecordShard& shard : record_shards_) {
    MutexLock lock(shard.mu);
    for (const auto& [address, record] : shard.records) {
      auto it = which.find(record.owner);
      if (it == which.end()) continue;
      std::vector<Candidate>& heap = heaps[it->second];
      if (heap.size() == kMaxLeakAllocations) {
        if (record.size <= heap.front().info.size) continue;
        std::pop_heap(heap.begin(), heap.end(), larger);
        heap.pop_back();
      }
      Candidate c{{address, record.size, record.device, ToTimePoint(record.time_ns), {}},
                  record.trace};
      heap.push_back(std::move(c));
      std::push_heap(heap.begin(), heap.end(), larger);
    }
  }

  for (size_t i = 0; i < pending.size(); ++i) {
    std::vector<Candidate>& heap = heaps[i];
    std::sort(heap.begin(), heap.end(), [](const Candidate& a, const Candidate& b) {
      return a.info.size != b.info.size ? a.info.size > b.info.size
                                        : a.info.address < b.info.address;
    });
    FiledLeak& leak = pending[i].leak;
    for (Candidate& c : heap) {
      leak.report.allocations.push_back(std::move(c.info));
      leak.traces.push_back(std::move(c.trace));
    }
  }
}

std::vector<LeakReport> Ledger::Impl::File(std::vector<PendingLeak> pending) {
  if (pending.empty()) return {};
  {
    MutexLock lock(history_mu_);
    for (const PendingLeak& p : pending) {
      history_.push_back(p.leak);
      if (history_.size() > kMaxLeakHistory) history_.pop_front();
    }
  }
  FrameSymbolizer symbolizer;
  std::vector<LeakReport> reports;
  reports.reserve(pending.size());
  for (PendingLeak& p : pending) {
    leaked_bytes_.fetch_add(p.leak.report.bytes, std::memory_order_relaxed);
    leak_reports_.fetch_add(1, std::memory_order_relaxed);
    LeakReport& report = reports.emplace_back(std::move(p.leak.report));
    for (size_t i = 0; i < report.allocations.size(); ++i) {
      report.allocations[i].backtrace = symbolizer.Symbolize(p.leak.traces[i]);
    }
  }
  std::function<void(const LeakReport&)> callback;
  {
    MutexLock lock(callback_mu_);
    callback = callback_;
  }
  if (callback) {
    for (const LeakReport& report : reports) callback(report);
  }
  return reports;
}

void Ledger::Impl::RecordAllocation(const void* ptr, size_t size, Device device, OwnerId owner,
                                    const void* caller) {
  if (ptr == nullptr) return;
  if (owner == kNoOwner) owner = OwnerScope::Current();
  Commit(PinAndCharge(owner, size, DeviceSlot(device), /*count=*/false), size, device, ptr, caller);
}

Result<Ledger::PendingCharge> Ledger::Impl::Charge(Device device, size_t size, OwnerId owner,
                                                   bool* by_budget) {
  if (owner == kNoOwner) owner = OwnerScope::Current();
  std::shared_ptr<QuotaState> refused_by;
  OwnerNode* node = PinAndCharge(owner, size, DeviceSlot(device), /*count=*/false,
                                 /*enforce=*/true, &refused_by);
  if (node == nullptr) {
    quota_refusals_.fetch_add(1, std::memory_order_relaxed);
    const int slot = DeviceSlot(device);
    const int64_t used = refused_by->used[slot].load(std::memory_order_relaxed);
    const bool budget = refused_by->owner == root_->id;
    if (by_budget != nullptr) *by_budget = budget;
    return Status::ResourceExhausted(fmt::format(
        "{} refuses {} on {} for {}: {} holds {} of its {} there",
        budget ? std::string("the server's memory budget (--memory-budget)")
               : "memory quota of " + OwnerPath(refused_by->owner),
        FormatBytes(size), device.ToString(),
        owner == kNoOwner ? std::string("server") : OwnerPath(owner), budget ? "the server" : "it",
        FormatBytes(static_cast<size_t>(std::max<int64_t>(used, 0))),
        FormatBytes(static_cast<size_t>(refused_by->limit[slot]))));
  }
  PendingCharge charge;
  charge.impl_ = this;
  charge.node_ = node;
  charge.size_ = size;
  charge.device_ = device;
  return charge;
}

void Ledger::Impl::Commit(OwnerNode* node, size_t size, Device device, const void* ptr,
                          const void* caller) {
  Backtrace trace;
  if (trace_.load(std::memory_order_relaxed)) trace = Backtrace::Capture(max_frames_, caller);
  const auto bytes = static_cast<int64_t>(size);
  node->total_bytes.fetch_add(bytes, std::memory_order_relaxed);
  node->total_count.fetch_add(1, std::memory_order_relaxed);
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  RecordShard& shard = RecordShardFor(address);
  Record record{node, size, device, NowNanos(), std::move(trace)};
  std::optional<Record> replaced;
  {
    MutexLock lock(shard.mu);
    auto [it, inserted] = shard.records.try_emplace(address, std::move(record));
    if (!inserted) {  // recorded twice without a free: the newer record wins
      replaced.emplace(std::move(it->second));
      it->second = std::move(record);
    }
  }
  if (replaced) Release(*replaced);
}

void Ledger::Impl::Undo(OwnerNode* node, size_t size, Device device) {
  Release(Record{node, size, device, 0, {}});
}

int64_t Ledger::Impl::PredictExecutionPeak(OwnerId learner, Device device, int64_t batch_size,
                                           bool scale) const {
  std::shared_ptr<QuotaState> q = OwnQuota(learner);
  if (q == nullptr) return kUnknownPeak;
  const int slot = DeviceSlot(device);
  MutexLock lock(q->learned_mu);
  auto it = q->learned.lower_bound({slot, batch_size});
  if (it != q->learned.end() && it->first.first == slot) return it->second;  // this size or larger
  if (!scale || it == q->learned.begin()) return kUnknownPeak;
  --it;  // the largest smaller size
  if (it->first.first != slot || it->first.second <= 0) return kUnknownPeak;
  return it->second * batch_size / it->first.second;
}

int64_t Ledger::Impl::MadeSinceMark(OwnerId owner, Device device) const {
  std::shared_ptr<QuotaState> q = OwnQuota(owner);
  if (q == nullptr) return 0;
  const int slot = DeviceSlot(device);
  // Acquire: a charge seen here is seen in the outer quotas read after (PinAndCharge).
  return std::max<int64_t>(0, q->used[slot].load(std::memory_order_acquire) -
                                  q->mark[slot].load(std::memory_order_relaxed));
}

std::pair<int64_t, int64_t> Ledger::Impl::BudgetOf(Device device) const {
  const QuotaState* budget = root_->quota.get();
  if (budget == nullptr) return {0, 0};
  const int slot = DeviceSlot(device);
  return {budget->used[slot].load(std::memory_order_acquire), budget->limit[slot]};
}

std::shared_ptr<QuotaState> Ledger::Impl::OwnQuota(OwnerId id) const {
  OwnerShard& shard = OwnerShardFor(id);
  MutexLock lock(shard.mu);
  auto it = shard.owners.find(id);
  if (it == shard.owners.end() || it->second->quota == nullptr ||
      it->second->quota->owner != id) {
    return nullptr;
  }
  return it->second->quota;
}

void Ledger::Impl::MarkPeaks(OwnerId owner) {
  std::shared_ptr<QuotaState> q = OwnQuota(owner);
  if (q == nullptr) return;
  for (int slot = 0; slot < kDeviceSlots; ++slot) {
    const int64_t now = q->used[slot].load(std::memory_order_relaxed);
    q->mark[slot].store(now, std::memory_order_relaxed);
    q->peak[slot].store(now, std::memory_order_relaxed);
  }
}

void Ledger::Impl::LearnExecutionPeaks(OwnerId measured, OwnerId learner, int64_t batch_size,
                                       Device device) {
  std::shared_ptr<QuotaState> from = OwnQuota(measured);
  std::shared_ptr<QuotaState> to = OwnQuota(learner);
  if (from == nullptr || to == nullptr) return;
  std::array<int64_t, kDeviceSlots> rise{};
  for (int slot = 0; slot < kDeviceSlots; ++slot) {
    rise[slot] = from->peak[slot].load(std::memory_order_relaxed) -
                 from->mark[slot].load(std::memory_order_relaxed);
  }
  const int own = DeviceSlot(device);
  MutexLock lock(to->learned_mu);
  for (int slot = 0; slot < kDeviceSlots; ++slot) {
    // On the execution's own device a figure is kept even when nothing was made: a known 0
    // is not the unknown an execution must run alone for (admission.h).
    if (rise[slot] <= 0 && slot != own) continue;
    rise[slot] = std::max<int64_t>(rise[slot], 0);
    int64_t& learned = to->learned[{slot, batch_size}];
    learned = std::max(learned, rise[slot]);
  }
}

OwnerNode* Ledger::Impl::PinAndCharge(OwnerId id, size_t size, int slot, bool count,
                                      bool enforce, std::shared_ptr<QuotaState>* refused_by) {
  // The quotas' shares first: a refusal must leave the node untouched. Outermost first (the
  // server's budget, then down to the node's own), each with release order: whoever reads an
  // inner quota's rise and then an outer one's use (admission reads an instance's rise, then
  // the budget's use, admission.cc) finds this charge in the outer one whenever it saw it in
  // the inner. Inner first, a reader between the two saw the rise and not the use, counted
  // the charge nowhere, and admitted an execution the budget then refused.
  auto admit = [&](OwnerNode* node) {
    const auto bytes = static_cast<int64_t>(size);
    size_t depth = 0;
    for (QuotaState* q = node->quota.get(); q != nullptr; q = q->parent.get()) ++depth;
    auto level = [&](size_t index) {  // 0: the node's own quota, depth - 1: the outermost
      QuotaState* q = node->quota.get();
      while (index-- > 0) q = q->parent.get();
      return q;
    };
    for (size_t k = depth; k-- > 0;) {
      QuotaState* quota = level(k);
      std::atomic<int64_t>& used = quota->used[slot];
      const int64_t limit = quota->limit[slot];
      if (!enforce || limit == 0) {
        const int64_t now = used.fetch_add(bytes, std::memory_order_acq_rel) + bytes;
        RaiseToAtLeast(quota->peak[slot], now);
        continue;
      }
      int64_t current = used.load(std::memory_order_relaxed);
      bool fits = true;
      do {
        if (current + bytes > limit) {
          fits = false;
          break;
        }
      } while (!used.compare_exchange_weak(current, current + bytes, std::memory_order_acq_rel,
                                           std::memory_order_relaxed));
      if (fits) {
        RaiseToAtLeast(quota->peak[slot], current + bytes);
        continue;
      }
      for (size_t passed = depth - 1; passed > k; --passed) {
        level(passed)->used[slot].fetch_sub(bytes, std::memory_order_acq_rel);
      }
      // The innermost quota the charge passes is the one named (and counted), as when the
      // inner ones were charged first: a model's own quota is not relieved as the budget is
      // (allocator.h) even when the budget is passed too.
      QuotaState* refusing = quota;
      for (size_t inner = 0; inner < k; ++inner) {
        QuotaState* q = level(inner);
        if (q->limit[slot] != 0 &&
            q->used[slot].load(std::memory_order_relaxed) + bytes > q->limit[slot]) {
          refusing = q;
          break;
        }
      }
      refusing->refusals[slot].fetch_add(1, std::memory_order_relaxed);
      *refused_by = QuotaInChain(node->quota, refusing);
      return false;
    }
    return true;
  };
  auto charge = [&](OwnerNode* node) {
    const auto bytes = static_cast<int64_t>(size);
    const int64_t live = node->live_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    RaiseToAtLeast(node->peak_bytes, live);
    if (count) {
      node->total_bytes.fetch_add(bytes, std::memory_order_relaxed);
      node->total_count.fetch_add(1, std::memory_order_relaxed);
    }
    node->device_bytes[slot].fetch_add(bytes, std::memory_order_relaxed);
    return node;
  };
  if (id == kNoOwner || id == root_->id) {  // the root never closes: no lookup, no lock
    if (!admit(root_)) return nullptr;
    root_->state.fetch_add(2, std::memory_order_relaxed);
    return charge(root_);
  }
  {
    OwnerShard& shard = OwnerShardFor(id);
    MutexLock lock(shard.mu);
    auto it = shard.owners.find(id);
    if (it != shard.owners.end()) {
      OwnerNode* node = it->second;
      int64_t state = node->state.load(std::memory_order_relaxed);
      // The closed bit is set only under this mutex: open now, open until the pin below.
      if ((state & 1) == 0 && !admit(node)) return nullptr;
      while ((state & 1) == 0) {
        if (node->state.compare_exchange_weak(state, state + 2, std::memory_order_relaxed)) {
          return charge(node);  // under the shard mutex, so CloseOwner sees all of it or none
        }
      }
    }
  }
  // Closed (or dropped): the nearest open ancestor pays. A dropped owner's parent is no longer
  // known, so the root does. Nothing closes while tree_mu_ is held.
  MutexLock tree(tree_mu_);
  OwnerNode* node = FindLocked(id);
  if (node == nullptr) node = root_;
  while (node->closed()) node = node->parent;
  if (!admit(node)) return nullptr;
  node->state.fetch_add(2, std::memory_order_relaxed);
  return charge(node);
}

OwnerId Ledger::Impl::RecordFree(const void* ptr) {
  if (ptr == nullptr) return kNoOwner;
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  RecordShard& shard = RecordShardFor(address);
  decltype(shard.records)::node_type entry;  // destroyed after the mutex is released
  {
    MutexLock lock(shard.mu);
    auto it = shard.records.find(address);
    if (it != shard.records.end()) entry = shard.records.extract(it);
  }
  if (entry.empty()) {
    unknown_frees_.fetch_add(1, std::memory_order_relaxed);
    return kNoOwner;
  }
  return Release(entry.mapped());
}

bool Ledger::Impl::Knows(const void* ptr) {
  if (ptr == nullptr) return false;
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  RecordShard& shard = RecordShardFor(address);
  MutexLock lock(shard.mu);
  return shard.records.count(address) != 0;
}

Status Ledger::Impl::Recharge(const void* ptr, OwnerId owner) {
  if (ptr == nullptr) return Status::NotFound("recharge of a null pointer");
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  RecordShard& shard = RecordShardFor(address);
  size_t size = 0;
  Device device;
  {
    MutexLock lock(shard.mu);
    auto it = shard.records.find(address);
    if (it == shard.records.end()) {
      return Status::NotFound(fmt::format("recharge of {}: not a live allocation", ptr));
    }
    size = it->second.size;
    device = it->second.device;
  }
  // The new owner is pinned and charged before the record moves to it, and the old one is
  // released after, so that neither can be dropped while the record points at it.
  OwnerNode* node = PinAndCharge(owner, size, DeviceSlot(device), /*count=*/false);
  Record old{node, size, device, 0, {}};
  bool moved = false;
  {
    MutexLock lock(shard.mu);
    auto it = shard.records.find(address);
    // Freed, or freed and made again at the same address, since the first look: charge nothing.
    if (it != shard.records.end() && it->second.size == size && it->second.device == device) {
      std::swap(old.owner, it->second.owner);
      moved = true;
    }
  }
  Release(old);  // the old owner's charge, or, when nothing moved, the one just made
  if (!moved) return Status::NotFound(fmt::format("recharge of {}: freed meanwhile", ptr));
  return Status::Ok();
}

OwnerId Ledger::Impl::Release(const Record& record) {
  OwnerNode* node = record.owner;
  const OwnerId id = node->id;
  const auto bytes = static_cast<int64_t>(record.size);
  node->live_bytes.fetch_sub(bytes, std::memory_order_relaxed);
  node->device_bytes[DeviceSlot(record.device)].fetch_sub(bytes, std::memory_order_relaxed);
  // Innermost first, the other way from a charge: a reader that reads an inner quota and then
  // an outer one may see the outer still holding what the inner let go, never the reverse,
  // so memory being freed is at worst counted twice, never missed.
  for (QuotaState* quota = node->quota.get(); quota != nullptr; quota = quota->parent.get()) {
    quota->used[DeviceSlot(record.device)].fetch_sub(bytes, std::memory_order_acq_rel);
  }
  // The last access to `node`: once the count is down, another thread may delete it.
  if (node->state.fetch_sub(2, std::memory_order_acq_rel) == 3) DropIfDone(id);
  return id;
}

void Ledger::Impl::DropIfDone(OwnerId id) {
  MutexLock tree(tree_mu_);
  if (OwnerNode* node = FindLocked(id)) DropIfDoneLocked(node);
}

void Ledger::Impl::DropIfDoneLocked(OwnerNode* node) {
  while (node != root_ && node->first_child == nullptr &&
         node->state.load(std::memory_order_acquire) == 1) {
    OwnerNode* parent = node->parent;
    UnlinkLocked(node);
    {
      OwnerShard& shard = OwnerShardFor(node->id);
      MutexLock lock(shard.mu);
      shard.owners.erase(node->id);
    }
    delete node;
    node = parent;
  }
}

void Ledger::Impl::LinkLocked(OwnerNode* parent, OwnerNode* child) {
  child->parent = parent;
  child->prev_sibling = parent->last_child;
  if (parent->last_child != nullptr) {
    parent->last_child->next_sibling = child;
  } else {
    parent->first_child = child;
  }
  parent->last_child = child;
}

void Ledger::Impl::UnlinkLocked(OwnerNode* node) {
  OwnerNode* parent = node->parent;
  (node->prev_sibling ? node->prev_sibling->next_sibling : parent->first_child) =
      node->next_sibling;
  (node->next_sibling ? node->next_sibling->prev_sibling : parent->last_child) =
      node->prev_sibling;
}

OwnerNode* Ledger::Impl::FindLocked(OwnerId id) const {
  OwnerShard& shard = OwnerShardFor(id);
  MutexLock lock(shard.mu);
  auto it = shard.owners.find(id);
  return it == shard.owners.end() ? nullptr : it->second;
}

std::string Ledger::Impl::PathLocked(const OwnerNode* node) const {
  std::vector<const OwnerNode*> chain;
  for (; node != root_; node = node->parent) chain.push_back(node);
  std::string path(root_->name);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    path += '/';
    path += OwnerKindName((*it)->kind);
    path += ':';
    path += (*it)->name;
  }
  return path;
}

int64_t Ledger::Impl::LiveBytesOf(OwnerId id) const {
  OwnerShard& shard = OwnerShardFor(id);
  MutexLock lock(shard.mu);
  auto it = shard.owners.find(id);
  return it == shard.owners.end() ? 0 : it->second->live_bytes.load(std::memory_order_relaxed);
}

Result<OwnerStats> Ledger::Impl::Stats(OwnerId id) const {
  OwnerShard& shard = OwnerShardFor(id);
  MutexLock lock(shard.mu);
  auto it = shard.owners.find(id);
  if (it == shard.owners.end()) return Status::NotFound("no owner " + std::to_string(id));
  return StatsOf(*it->second);
}

Result<int64_t> Ledger::Impl::SubtreeLiveBytes(OwnerId id) const {
  MutexLock tree(tree_mu_);
  OwnerNode* top = FindLocked(id);
  if (top == nullptr) return Status::NotFound("no owner " + std::to_string(id));
  int64_t bytes = 0;
  std::vector<const OwnerNode*> stack{top};
  while (!stack.empty()) {
    const OwnerNode* node = stack.back();
    stack.pop_back();
    bytes += node->live_bytes.load(std::memory_order_relaxed);
    for (const OwnerNode* c = node->first_child; c != nullptr; c = c->next_sibling) {
      stack.push_back(c);
    }
  }
  return bytes;
}

Result<std::vector<Ledger::LiveAllocation>> Ledger::Impl::LiveAllocationsBelow(OwnerId id,
                                                                             Device device) {
  // tree_mu_ for the whole scan: no node of the subtree can be deleted while its records are
  // read (a record's node is alive while the record is), and the lock order allows the shards.
  MutexLock tree(tree_mu_);
  OwnerNode* top = FindLocked(id);
  if (top == nullptr) return Status::NotFound("no owner " + std::to_string(id));
  std::unordered_map<const OwnerNode*, OwnerId> subtree;
  std::vector<const OwnerNode*> stack{top};
  while (!stack.empty()) {
    const OwnerNode* node = stack.back();
    stack.pop_back();
    subtree.emplace(node, node->id);
    for (const OwnerNode* c = node->first_child; c != nullptr; c = c->next_sibling) {
      if (c->kind == OwnerKind::kVersion || c->kind == OwnerKind::kInstance) stack.push_back(c);
    }
  }
  std::vector<Ledger::LiveAllocation> out;
  for (RecordShard& shard : record_shards_) {
    MutexLock lock(shard.mu);
    for (const auto& [address, record] : shard.records) {
      if (record.device != device) continue;
      auto it = subtree.find(record.owner);
      if (it == subtree.end()) continue;
      out.push_back({reinterpret_cast<const void*>(address), record.size, it->second});
    }
  }
  return out;
}

std::string Ledger::Impl::OwnerPath(OwnerId id) const {
  MutexLock tree(tree_mu_);
  const OwnerNode* node = FindLocked(id);
  return node == nullptr ? std::string() : PathLocked(node);
}

std::vector<OwnerSnapshot> Ledger::Impl::Snapshot() const {
  std::vector<OwnerSnapshot> out;
  std::vector<size_t> parent_index;  // parallel to out; SIZE_MAX for the root
  MutexLock tree(tree_mu_);
  std::vector<std::pair<const OwnerNode*, size_t>> stack{{root_, SIZE_MAX}};
  while (!stack.empty()) {  // pre-order: parents before children, children in opening order
    auto [node, parent] = stack.back();
    stack.pop_back();
    OwnerSnapshot& s = out.emplace_back();
    parent_index.push_back(parent);
    s.id = node->id;
    s.parent = node->parent == nullptr ? kNoOwner : node->parent->id;
    s.kind = node->kind;
    s.name = node->name;
    s.closed = node->closed();
    s.self = StatsOf(*node);
    s.subtree_live_bytes = s.self.live_bytes;
    s.subtree_live_count = s.self.live_count;
    for (int slot = 0; slot < kDeviceSlots; ++slot) {
      int64_t bytes = node->device_bytes[slot].load(std::memory_order_relaxed);
      if (bytes != 0) s.live_bytes_by_device.emplace_back(SlotDevice(slot), bytes);
    }
    if (node->quota != nullptr && node->quota->owner == node->id) {
      const QuotaState& q = *node->quota;
      auto use = [&q](int slot, Device device) {
        return QuotaUse{device, q.limit[slot], q.used[slot].load(std::memory_order_relaxed),
                        q.refusals[slot].load(std::memory_order_relaxed)};
      };
      for (const QuotaLimit& l : q.spec) {
        if (l.bytes == 0) continue;  // measured only (MeasurePeaks)
        if (!(l.device.is_cuda() && l.device.index == kEveryGpu)) {
          s.quota.push_back(use(DeviceSlot(l.device), l.device));
          continue;
        }
        bool any = false;  // each GPU: those it has seen, else the limit alone
        for (int slot = kFirstCudaSlot; slot <= kLastCudaSlot; ++slot) {
          if (QuotaLimitFor(q.spec, SlotDevice(slot)) != l.bytes) continue;  // named apart
          QuotaUse u = use(slot, SlotDevice(slot));
          if (u.used_bytes == 0 && u.refusals == 0) continue;
          s.quota.push_back(u);
          any = true;
        }
        if (!any) s.quota.push_back(QuotaUse{l.device, l.bytes, 0, 0});
      }
    }
    if (node->quota != nullptr && node->quota->owner == node->id) {
      QuotaState& q = *node->quota;
      MutexLock learned(q.learned_mu);
      for (const auto& [key, bytes] : q.learned) {
        s.execution_peaks.push_back({SlotDevice(key.first), key.second, bytes});
      }
    }
    for (const OwnerNode* c = node->last_child; c != nullptr; c = c->prev_sibling) {
      stack.emplace_back(c, out.size() - 1);
    }
  }
  // Children come after their parent, so adding backwards folds each subtree up in one pass.
  for (size_t i = out.size(); i-- > 1;) {
    out[parent_index[i]].subtree_live_bytes += out[i].subtree_live_bytes;
    out[parent_index[i]].subtree_live_count += out[i].subtree_live_count;
  }
  return out;
}

std::vector<LeakReport> Ledger::Impl::Leaks() const {
  std::vector<FiledLeak> filed;
  {
    MutexLock lock(history_mu_);
    filed.assign(history_.begin(), history_.end());
  }
  FrameSymbolizer symbolizer;
  std::vector<LeakReport> reports;
  reports.reserve(filed.size());
  for (FiledLeak& leak : filed) {
    LeakReport& report = reports.emplace_back(std::move(leak.report));
    report.still_live_bytes = static_cast<size_t>(std::max<int64_t>(LiveBytesOf(report.owner), 0));
    for (size_t i = 0; i < report.allocations.size(); ++i) {
      report.allocations[i].backtrace = symbolizer.Symbolize(leak.traces[i]);
    }
  }
  return reports;
}

// Ledger forwards to Impl.

Ledger::Ledger(Options options) : impl_(std::make_unique<Impl>(options)) {}
Ledger::~Ledger() = default;
OwnerId Ledger::root() const { return impl_->root(); }
OwnerId Ledger::OpenOwner(OwnerId parent, OwnerKind kind, std::string name,
                          MemoryQuota quota) {
  return impl_->OpenOwner(parent, kind, std::move(name), std::move(quota));
}
std::vector<LeakReport> Ledger::CloseOwner(OwnerId owner) { return impl_->CloseOwner(owner); }

// noinline: its return address is where the allocation site's backtrace starts.
__attribute__((noinline)) void Ledger::RecordAllocation(const void* ptr, size_t size,
                                                        Device device, OwnerId owner) {
  impl_->RecordAllocation(ptr, size, device, owner, __builtin_return_address(0));
}
Result<Ledger::PendingCharge> Ledger::Charge(Device device, size_t size, OwnerId owner,
                                             bool* by_budget) {
  return impl_->Charge(device, size, owner, by_budget);
}
// noinline, as RecordAllocation.
__attribute__((noinline)) void Ledger::Commit(PendingCharge charge, const void* ptr) {
  if (charge.node_ == nullptr || ptr == nullptr) return;  // an uncommitted charge undoes itself
  impl_->Commit(static_cast<OwnerNode*>(std::exchange(charge.node_, nullptr)), charge.size_,
                charge.device_, ptr, __builtin_return_address(0));
}

Ledger::PendingCharge::~PendingCharge() {
  if (node_ != nullptr) impl_->Undo(static_cast<OwnerNode*>(node_), size_, device_);
}
Ledger::PendingCharge::PendingCharge(PendingCharge&& other) noexcept
    : impl_(other.impl_),
      node_(std::exchange(other.node_, nullptr)),
      size_(other.size_),
      device_(other.device_) {}
Ledger::PendingCharge& Ledger::PendingCharge::operator=(PendingCharge&& other) noexcept {
  if (this != &other) {
    if (node_ != nullptr) impl_->Undo(static_cast<OwnerNode*>(node_), size_, device_);
    impl_ = other.impl_;
    node_ = std::exchange(other.node_, nullptr);
    size_ = other.size_;
    device_ = other.device_;
  }
  return *this;
}

void Ledger::MarkPeaks(OwnerId owner) { impl_->MarkPeaks(owner); }
int64_t Ledger::PredictExecutionPeak(OwnerId learner, Device device, int64_t batch_size) const {
  return impl_->PredictExecutionPeak(learner, device, batch_size);
}
int64_t Ledger::LearnedExecutionPeak(OwnerId learner, Device device, int64_t batch_size) const {
  return impl_->PredictExecutionPeak(learner, device, batch_size, /*scale=*/false);
}
int64_t Ledger::MadeSinceMark(OwnerId owner, Device device) const {
  return impl_->MadeSinceMark(owner, device);
}
std::pair<int64_t, int64_t> Ledger::BudgetOf(Device device) const {
  return impl_->BudgetOf(device);
}
void Ledger::LearnExecutionPeaks(OwnerId measured, OwnerId learner, int64_t batch_size,
                                 Device device) {
  impl_->LearnExecutionPeaks(measured, learner, batch_size, device);
}
OwnerId Ledger::RecordFree(const void* ptr) { return impl_->RecordFree(ptr); }
Status Ledger::Recharge(const void* ptr, OwnerId owner) { return impl_->Recharge(ptr, owner); }
bool Ledger::Knows(const void* ptr) const { return impl_->Knows(ptr); }
Result<OwnerStats> Ledger::Stats(OwnerId owner) const { return impl_->Stats(owner); }
Result<std::vector<Ledger::LiveAllocation>> Ledger::LiveAllocationsBelow(OwnerId owner,
                                                                        Device device) {
  return impl_->LiveAllocationsBelow(owner, device);
}
Result<int64_t> Ledger::SubtreeLiveBytes(OwnerId owner) const {
  return impl_->SubtreeLiveBytes(owner);
}
std::string Ledger::OwnerPath(OwnerId owner) const { return impl_->OwnerPath(owner); }
std::vector<OwnerSnapshot> Ledger::Snapshot() const { return impl_->Snapshot(); }
std::vector<LeakReport> Ledger::Leaks() const { return impl_->Leaks(); }
uint64_t Ledger::leaked_bytes_total() const { return impl_->leaked_bytes_total(); }
uint64_t Ledger::leak_reports_total() const { return impl_->leak_reports_total(); }
uint64_t Ledger::unknown_frees() const { return impl_->unknown_frees(); }
uint64_t Ledger::quota_refusals_total() const { return impl_->quota_refusals_total(); }
void Ledger::set_trace(bool on) { impl_->set_trace(on); }
bool Ledger::trace() const { return impl_->trace(); }
void Ledger::SetLeakCallback(std::function<void(const LeakReport&)> callback) {
  impl_->SetLeakCallback(std::move(callback));
}

// OwnerScope and ScopedOwner.

OwnerScope::OwnerScope(OwnerId owner) : previous_(t_current_owner), previous_lazy_(t_current_lazy) {
  t_current_owner = owner;
  t_current_lazy = nullptr;
}
OwnerScope::OwnerScope(LazyOwner* lazy) : previous_(t_current_owner), previous_lazy_(t_current_lazy) {
  t_current_owner = kNoOwner;
  t_current_lazy = lazy;
}
OwnerScope::~OwnerScope() {
  t_current_owner = previous_;
  t_current_lazy = previous_lazy_;
}
OwnerId OwnerScope::Current() {
  return t_current_lazy != nullptr ? t_current_lazy->Open() : t_current_owner;
}

LazyOwner::LazyOwner(Ledger* ledger, OwnerId parent, OwnerKind kind, std::string name)
    : ledger_(ledger), parent_(parent), kind_(kind), name_(std::move(name)) {}

LazyOwner::~LazyOwner() { (void)Close(); }

LazyOwner::LazyOwner(LazyOwner&& other) noexcept { *this = std::move(other); }

LazyOwner& LazyOwner::operator=(LazyOwner&& other) noexcept {
  if (this != &other) {
    (void)Close();
    ledger_ = std::exchange(other.ledger_, nullptr);
    parent_ = other.parent_;
    kind_ = other.kind_;
    name_ = std::move(other.name_);
    id_ = std::exchange(other.id_, kNoOwner);
  }
  return *this;
}

OwnerId LazyOwner::Open() {
  if (id_ == kNoOwner && ledger_ != nullptr) id_ = ledger_->OpenOwner(parent_, kind_, name_);
  return id_;
}

std::vector<LeakReport> LazyOwner::Close() {
  if (ledger_ == nullptr || id_ == kNoOwner) return {};
  return ledger_->CloseOwner(std::exchange(id_, kNoOwner));
}

ScopedOwner::ScopedOwner(Ledger* ledger, OwnerId parent, OwnerKind kind, std::string name,
                         MemoryQuota quota)
    : ledger_(ledger), id_(ledger->OpenOwner(parent, kind, std::move(name), std::move(quota))) {}

ScopedOwner::~ScopedOwner() { (void)Close(); }

ScopedOwner::ScopedOwner(ScopedOwner&& other) noexcept
    : ledger_(std::exchange(other.ledger_, nullptr)), id_(std::exchange(other.id_, kNoOwner)) {}

ScopedOwner& ScopedOwner::operator=(ScopedOwner&& other) noexcept {
  if (this != &other) {
    (void)Close();
    ledger_ = std::exchange(other.ledger_, nullptr);
    id_ = std::exchange(other.id_, kNoOwner);
  }
  return *this;
}

std::vector<LeakReport> ScopedOwner::Close() {
  if (ledger_ == nullptr || id_ == kNoOwner) return {};
  OwnerId id = std::exchange(id_, kNoOwner);
  return ledger_->CloseOwner(id);
}

}  // namespace vramd::memory
