#include "memory/native_memory.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>

namespace vramd::memory {
namespace {

bool KnownOrdinal(int ordinal) {
  return ordinal >= 0 && ordinal < NativeMemoryMeter::kMaxDevices;
}

// The charges a meter can measure: active, on a device it keeps figures for.
std::vector<NativeCharges*> Measurable(const std::vector<NativeCharges*>& charges) {
  std::vector<NativeCharges*> out;
  for (NativeCharges* c : charges) {
    if (c != nullptr && c->active() && KnownOrdinal(c->ordinal())) out.push_back(c);
  }
  return out;
}

std::vector<NativeCharges*> PointersTo(std::vector<NativeCharges>& group) {
  std::vector<NativeCharges*> out;
  for (NativeCharges& c : group) out.push_back(&c);
  return out;
}

}  // namespace

NativeCharges& NativeCharges::operator=(NativeCharges&& other) noexcept {
  if (this == &other) return *this;
  Release();
  meter_ = other.meter_;
  owner_ = other.owner_;
  ordinal_ = other.ordinal_;
  backend_ = std::move(other.backend_);
  bytes_ = other.bytes_;
  executions_measured = other.executions_measured;
  keys_ = std::move(other.keys_);
  other.meter_ = nullptr;
  other.bytes_ = 0;
  other.keys_.clear();
  return *this;
}

void NativeCharges::Measure(const std::function<void()>& stretch) {
  if (meter_ == nullptr) {
    stretch();
    return;
  }
  if (!meter_->Measure({this}, stretch, NativeMemoryMeter::kCreationWait)) {
    spdlog::info("native memory: cuda:{} was being measured for {} s; an instance was created "
                 "unmeasured (what its libraries took shows as unattributed)",
                 ordinal_, NativeMemoryMeter::kCreationWait.count());
  }
}

void NativeCharges::MeasureExecution(const std::function<void()>& stretch) {
  if (meter_ == nullptr) {
    stretch();
    return;
  }
  if (meter_->Measure({this}, stretch, std::chrono::milliseconds(0))) ++executions_measured;
}

void NativeCharges::ReleaseAround(const std::function<void()>& end) {
  if (meter_ == nullptr) {
    end();
    return;
  }
  meter_->ReleaseAround({this}, end);
}

bool NativeCharges::MeasureGroup(std::vector<NativeCharges>& group,
                                 const std::function<void()>& stretch,
                                 std::chrono::milliseconds wait_for) {
  NativeMemoryMeter* meter = group.empty() ? nullptr : group.front().meter_;
  if (meter == nullptr) {
    stretch();
    return true;
  }
  return meter->Measure(PointersTo(group), stretch, wait_for);
}

void NativeCharges::ReleaseGroupAround(std::vector<NativeCharges>& group,
                                       const std::function<void()>& end) {
  NativeMemoryMeter* meter = group.empty() ? nullptr : group.front().meter_;
  if (meter == nullptr) {
    end();
    return;
  }
  meter->ReleaseAround(PointersTo(group), end);
}

void NativeCharges::Release() {
  if (meter_ != nullptr) meter_->Release(*this);
  meter_ = nullptr;
}

NativeMemoryMeter::NativeMemoryMeter(Ledger* ledger, const Allocator* allocator,
                                     const Nvml* nvml, uint32_t pid)
    : ledger_(ledger), allocator_(allocator), nvml_(nvml), pid_(pid) {}

NativeMemoryMeter::~NativeMemoryMeter() {
  MutexLock lock(residue_mu_);
  for (auto& [backend, residue] : residues_) {
    for (Residue& r : residue.devices) {
      if (r.bytes > 0) ledger_->RecordFree(r.key.get());
    }
  }
  residues_.clear();  // closes their owners, now empty
}

std::optional<int64_t> NativeMemoryMeter::ProcessBytes(int ordinal) const {
  auto used = nvml_->ProcessUsedBytes(ordinal, pid_);
  if (!used.ok()) return std::nullopt;
  return static_cast<int64_t>(*used);
}

int64_t NativeMemoryMeter::PoolReserved(int ordinal) const {
  int64_t reserved = 0;
  for (const PoolStats& p : allocator_->PoolStatistics()) {
    if (p.device == Device::Cuda(ordinal)) reserved += static_cast<int64_t>(p.reserved_bytes);
  }
  return reserved;
}

std::vector<std::unique_lock<std::timed_mutex>> NativeMemoryMeter::LockDevices(
    const std::vector<NativeCharges*>& charges, std::chrono::milliseconds wait_for) {
  std::vector<int> ordinals;
  for (const NativeCharges* c : charges) ordinals.push_back(c->ordinal_);
  std::sort(ordinals.begin(), ordinals.end());  // one order for every caller: no deadlock
  ordinals.erase(std::unique(ordinals.begin(), ordinals.end()), ordinals.end());
  std::vector<std::unique_lock<std::timed_mutex>> locks;
  for (int ordinal : ordinals) {
    std::unique_lock<std::timed_mutex> lock(device_mu_[ordinal], std::defer_lock);
    const bool locked = wait_for.count() == 0 ? lock.try_lock() : lock.try_lock_for(wait_for);
    if (!locked) return {};  // those taken so far unlock here
    locks.push_back(std::move(lock));
  }
  return locks;
}

std::vector<std::optional<int64_t>> NativeMemoryMeter::Growth(
    const std::vector<NativeCharges*>& charges, const std::function<void()>& stretch) const {
  std::vector<std::optional<int64_t>> before;
  std::vector<int64_t> pool_before;
  for (const NativeCharges* c : charges) {
    before.push_back(ProcessBytes(c->ordinal_));
    pool_before.push_back(PoolReserved(c->ordinal_));
  }
  stretch();
  std::vector<std::optional<int64_t>> growth(charges.size());
  for (size_t i = 0; i < charges.size(); ++i) {
    if (!before[i]) continue;
    const std::optional<int64_t> after = ProcessBytes(charges[i]->ordinal_);
    if (!after) continue;
    growth[i] = (*after - *before[i]) - (PoolReserved(charges[i]->ordinal_) - pool_before[i]);
  }
  return growth;
}

bool NativeMemoryMeter::Measure(const std::vector<NativeCharges*>& charges,
                                const std::function<void()>& stretch,
                                std::chrono::milliseconds wait_for) {
  const std::vector<NativeCharges*> measured = Measurable(charges);
  if (nvml_ == nullptr || measured.empty()) {
    stretch();
    return true;
  }
  const auto locks = LockDevices(measured, wait_for);
  if (locks.empty()) {
    stretch();
    return false;
  }
  const std::vector<std::optional<int64_t>> growth = Growth(measured, stretch);
  for (size_t i = 0; i < measured.size(); ++i) {
    if (!growth[i] || *growth[i] < kMinimumCharge) continue;
    NativeCharges& c = *measured[i];
    c.keys_.push_back(std::make_unique<char>());
    ledger_->RecordAllocation(c.keys_.back().get(), static_cast<size_t>(*growth[i]),
                              Device::Cuda(c.ordinal_), c.owner_);
    c.bytes_ += *growth[i];
    totals_[c.ordinal_].fetch_add(*growth[i]);
  }
  return true;
}

void NativeMemoryMeter::ReleaseAround(const std::vector<NativeCharges*>& charges,
                                      const std::function<void()>& end) {
  const std::vector<NativeCharges*> measured = Measurable(charges);
  auto release_all = [&] {
    for (NativeCharges* c : charges) {
      if (c != nullptr) c->Release();
    }
  };
  if (nvml_ == nullptr || measured.empty()) {
    end();
    release_all();
    return;
  }
  const auto locks = LockDevices(measured, kCreationWait);
  if (locks.empty()) {
    end();
    spdlog::info("native memory: a device was being measured for {} s; an owner ended "
                 "unmeasured (what it leaves behind shows as unattributed)",
                 kCreationWait.count());
    release_all();
    return;
  }
  const std::vector<std::optional<int64_t>> growth = Growth(measured, end);
  for (size_t i = 0; i < measured.size(); ++i) {
    NativeCharges& c = *measured[i];
    const int64_t charged = c.bytes_;
    const int ordinal = c.ordinal_;
    const std::string& backend = c.backend_;  // Release leaves it
    c.Release();
    if (!growth[i]) continue;  // no figure: nothing known of what stayed
    // The end's growth is negative by what it gave back.
    const int64_t stayed = charged + *growth[i];
    if (std::llabs(stayed) < kMinimumCharge) continue;
    AdjustResidue(backend, ordinal, stayed);
  }
  release_all();  // those not measurable
}

void NativeMemoryMeter::AdjustResidue(const std::string& backend, int ordinal, int64_t delta) {
  MutexLock lock(residue_mu_);
  auto it = residues_.find(backend);
  if (it == residues_.end()) {
    if (delta <= 0) return;  // nothing of this backend's stayed: nothing to take back
    it = residues_
             .emplace(backend, BackendResidue{ScopedOwner(ledger_, ledger_->root(),
                                                          OwnerKind::kBackend, backend),
                                              {}})
             .first;
  }
  Residue& r = it->second.devices[ordinal];
  const int64_t next = std::max<int64_t>(0, r.bytes + delta);
  const int64_t applied = next - r.bytes;
  if (applied == 0) return;
  if (next == 0) {
    ledger_->RecordFree(r.key.get());
  } else {
    ledger_->RecordAllocation(r.key.get(), static_cast<size_t>(next), Device::Cuda(ordinal),
                              it->second.owner.id());
  }
  r.bytes = next;
  residue_totals_[ordinal].fetch_add(applied);
  totals_[ordinal].fetch_add(applied);
  spdlog::info("native memory: backend '{}' keeps {} bytes on cuda:{} that outlived the owners "
               "that made them ({} {} bytes)",
               backend, next, ordinal, applied > 0 ? "up" : "down", std::llabs(applied));
}

void NativeMemoryMeter::Release(NativeCharges& charges) {
  for (const auto& key : charges.keys_) ledger_->RecordFree(key.get());
  charges.keys_.clear();
  if (KnownOrdinal(charges.ordinal_)) totals_[charges.ordinal_].fetch_sub(charges.bytes_);
  charges.bytes_ = 0;
}

int64_t NativeMemoryMeter::Total(int ordinal) const {
  if (!KnownOrdinal(ordinal)) return 0;
  return totals_[ordinal].load();
}

int64_t NativeMemoryMeter::ResidueTotal(int ordinal) const {
  if (!KnownOrdinal(ordinal)) return 0;
  return residue_totals_[ordinal].load();
}

}  // namespace vramd::memory
