#include "memory/admission.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "memory/allocator.h"
#include "memory/byte_size.h"

namespace vramd::memory {

Admission::Ticket::Ticket(Ticket&& other) noexcept
    : admission_(std::exchange(other.admission_, nullptr)), slot_(other.slot_), id_(other.id_) {}

Admission::Ticket& Admission::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    Release();
    admission_ = std::exchange(other.admission_, nullptr);
    slot_ = other.slot_;
    id_ = other.id_;
  }
  return *this;
}

void Admission::Ticket::Release() {
  if (admission_ != nullptr) std::exchange(admission_, nullptr)->Release(slot_, id_);
}

Admission::Admission(Ledger* ledger, const Allocator* allocator, DeviceFree device_free)
    : ledger_(ledger), allocator_(allocator), device_free_(std::move(device_free)) {
  MutexLock lock(mu_);
  for (int slot = 0; slot < kSlots; ++slot) {
    stats_[slot].device = slot == 0                ? Device::Cpu()
                          : slot == kSlots - 1     ? Device::CudaHost()
                                                   : Device::Cuda(slot - 1);
  }
}

int Admission::SlotOf(Device device) {
  switch (device.type) {
    case DeviceType::kCpu: return 0;
    case DeviceType::kCudaHost: return kSlots - 1;
    case DeviceType::kCuda: return 1 + std::clamp(device.index, 0, kSlots - 3);
  }
  return 0;
}

std::optional<int64_t> Admission::FreeNow(Device device) const {
  return device_free_ ? device_free_(device) : std::nullopt;
}

bool Admission::Governs(Device device) const {
  return ledger_->BudgetOf(device).second > 0 || (device.is_cuda() && device_free_ != nullptr);
}

int64_t Admission::OutstandingLocked(int slot, Device device) const {
  int64_t outstanding = 0;
  for (const Admitted& a : admitted_[slot]) {
    if (a.bytes == Ledger::kUnknownPeak) continue;  // runs alone: nothing is admitted beside it
    outstanding += std::max<int64_t>(0, a.bytes - ledger_->MadeSinceMark(a.measured, device));
  }
  return outstanding;
}

bool Admission::FitsLocked(int slot, Device device, int64_t bytes) const {
  if (admitted_[slot].empty()) return true;
  // What nobody has measured yet runs alone, and nothing runs beside it: a first execution
  // (or a burst of them) cannot be predicted, and many at once would pass the budget.
  if (bytes == Ledger::kUnknownPeak ||
      std::any_of(admitted_[slot].begin(), admitted_[slot].end(),
                  [](const Admitted& a) { return a.bytes == Ledger::kUnknownPeak; })) {
    return false;
  }
  // The running executions allocate and free while this reads: what they made is read
  // between two readings of the server's use, and the larger is taken, so that memory made
  // (or freed) meanwhile is counted at least once, never missed.
  const auto [used_before, budget] = ledger_->BudgetOf(device);
  if (budget <= 0) {
    // Against the device's free memory: what the running executions made is out of it
    // already; read after them, so that nothing they made meanwhile is counted as free.
    const int64_t outstanding = OutstandingLocked(slot, device);
    const std::optional<int64_t> free = FreeNow(device);
    return !free || outstanding + bytes <= *free;  // nothing to judge by: it starts
  }
  const int64_t outstanding = OutstandingLocked(slot, device);
  const auto [used_after, limit] = ledger_->BudgetOf(device);
  return std::max(used_before, used_after) + outstanding + bytes <= limit;
}

Admission::Ticket Admission::AdmitLocked(int slot, OwnerId measured, int64_t bytes) {
  const uint64_t id = next_id_++;
  admitted_[slot].push_back({id, measured, bytes});
  ++stats_[slot].admitted;
  Ticket ticket;
  ticket.admission_ = this;
  ticket.slot_ = slot;
  ticket.id_ = id;
  return ticket;
}

std::optional<Admission::Ticket> Admission::TryAdmit(Device device, int64_t bytes,
                                                     OwnerId measured) {
  if ((bytes <= 0 && bytes != Ledger::kUnknownPeak) || !Governs(device)) return Ticket();
  const int slot = SlotOf(device);
  MutexLock lock(mu_);
  if (!waiting_[slot].empty() || !FitsLocked(slot, device, bytes)) return std::nullopt;
  return AdmitLocked(slot, measured, bytes);
}

Result<Admission::Ticket> Admission::Admit(Device device, int64_t bytes, OwnerId measured,
                                           Clock::time_point deadline, const std::string& what) {
  const bool unknown = bytes == Ledger::kUnknownPeak;
  if ((bytes <= 0 && !unknown) || !Governs(device)) return Ticket();
  const int slot = SlotOf(device);
  const auto start = Clock::now();
  MutexLock lock(mu_);
  // The ledger's figure changes without telling us. Room for a waiter comes back when an
  // admitted execution ends, and when a request's owner closes after its reply, freeing its
  // outputs (MemoryFreed); both notify `ended_`. (The second came later: a waiter that found
  // the last execution's outputs still held, with nothing else running, waited out its whole
  // deadline.)
  bool waited = false;
  // Counted as a waiter before the first look: a free between that look and the wait then
  // finds the count and notifies (MemoryFreed), instead of passing unseen. Sequentially
  // consistent on both sides, against the free's own store of the ledger's figure.
  waiters_.fetch_add(1);
  const bool fit_at_once = waiting_[slot].empty() && FitsLocked(slot, device, bytes);
  if (fit_at_once) waiters_.fetch_sub(1);
  if (!fit_at_once) {
    waited = true;
    std::deque<uint64_t>& waiting = waiting_[slot];
    const uint64_t turn = next_wait_++;
    waiting.push_back(turn);
    auto my_turn_and_fits = [&]() REQUIRES(mu_) {
      return waiting.front() == turn && FitsLocked(slot, device, bytes);
    };
    const bool admitted = lock.WaitUntil(ended_, deadline, my_turn_and_fits);
    waiting.erase(std::find(waiting.begin(), waiting.end(), turn));
    waiters_.fetch_sub(1);
    // The next in line (when this one was first) may fit now, or may fit beside this one.
    ended_.notify_all();
    if (!admitted) {
      ++stats_[slot].timed_out;
      stats_[slot].wait_ns += (Clock::now() - start).count();
      const auto [used, limit] = ledger_->BudgetOf(device);
      std::string room;
      if (limit > 0) {
        room = fmt::format("the server holds {} of its {} budget there",
                           FormatBytes(static_cast<size_t>(std::max<int64_t>(used, 0))),
                           FormatBytes(static_cast<size_t>(limit)));
      } else {
        const std::optional<int64_t> free = FreeNow(device);
        room = free ? fmt::format("the device has {} free (the driver's free memory and the "
                                  "pool's cached free)",
                                  FormatBytes(static_cast<size_t>(std::max<int64_t>(*free, 0))))
                    : std::string("the device's free memory is unknown");
      }
      std::string message = fmt::format(
          "{}: an execution needing {} on {} waited {} ms for memory and its deadline came "
          "first: {} and running executions are predicted to make {} more",
          what,
          unknown ? std::string("an unknown amount (none of its size was measured yet, so it "
                                "runs alone)")
                  : FormatBytes(static_cast<size_t>(bytes)),
          device.ToString(),
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count(),
          room, FormatBytes(static_cast<size_t>(OutstandingLocked(slot, device))));
      // Who holds it, described unlocked: the description reads the memory report, which
      // reads this object's figures.
      lock.Unlock();
      if (allocator_ != nullptr) message += ". " + allocator_->DescribeDevice(device);
      spdlog::warn("{}", message);
      lock.Lock();
      return Status::Unavailable(std::move(message));
    }
  }
  if (waited) {
    ++stats_[slot].waited;
    stats_[slot].wait_ns += (Clock::now() - start).count();
  }
  return AdmitLocked(slot, measured, bytes);
}

void Admission::MemoryFreed() {
  std::atomic_thread_fence(std::memory_order_seq_cst);  // the free's store before this load
  if (waiters_.load() == 0) return;
  // Taking the mutex orders this after a waiter's check: it either sees the memory freed, or
  // is already waiting and gets the notification.
  { MutexLock lock(mu_); }
  ended_.notify_all();
}

void Admission::Release(int slot, uint64_t id) {
  {
    MutexLock lock(mu_);
    auto& admitted = admitted_[slot];
    admitted.erase(std::remove_if(admitted.begin(), admitted.end(),
                                  [id](const Admitted& a) { return a.id == id; }),
                   admitted.end());
  }
  ended_.notify_all();
}

int64_t Admission::RoomAlone(Device device) const {
  if (!Governs(device)) return -1;
  const int slot = SlotOf(device);
  MutexLock lock(mu_);
  const auto [used, limit] = ledger_->BudgetOf(device);
  int64_t made = 0;
  for (const Admitted& a : admitted_[slot]) {
    made += std::max<int64_t>(0, ledger_->MadeSinceMark(a.measured, device));
  }
  if (limit <= 0) {  // against the device's free memory, which what they made will join
    const std::optional<int64_t> free = FreeNow(device);
    return free ? *free + made : -1;
  }
  return limit - std::max<int64_t>(0, used - made);
}

void Admission::CountSplit(Device device) {
  if (!Governs(device)) return;
  MutexLock lock(mu_);
  ++stats_[SlotOf(device)].splits;
}

std::vector<Admission::DeviceStats> Admission::Stats() const {
  std::vector<DeviceStats> out;
  MutexLock lock(mu_);
  for (int slot = 0; slot < kSlots; ++slot) {
    if (!Governs(stats_[slot].device)) continue;
    const bool budgeted = ledger_->BudgetOf(stats_[slot].device).second > 0;
    if (!budgeted && stats_[slot].admitted == 0 && stats_[slot].timed_out == 0) continue;
    DeviceStats s = stats_[slot];
    s.reserved_bytes = OutstandingLocked(slot, s.device);
    out.push_back(s);
  }
  return out;
}

}  // namespace vramd::memory
