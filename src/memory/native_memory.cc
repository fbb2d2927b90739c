#include "memory/native_memory.h"

#include <spdlog/spdlog.h>

namespace vramd::memory {

NativeCharges& NativeCharges::operator=(NativeCharges&& other) noexcept {
  if (this == &other) return *this;
  Release();
  meter_ = other.meter_;
  owner_ = other.owner_;
  ordinal_ = other.ordinal_;
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
  if (!meter_->Measure(*this, stretch, NativeMemoryMeter::kCreationWait)) {
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
  if (meter_->Measure(*this, stretch, std::chrono::milliseconds(0))) ++executions_measured;
}

void NativeCharges::Release() {
  if (meter_ != nullptr) meter_->Release(*this);
  meter_ = nullptr;
}

NativeMemoryMeter::NativeMemoryMeter(Ledger* ledger, const Allocator* allocator,
                                     const Nvml* nvml, uint32_t pid)
    : ledger_(ledger), allocator_(allocator), nvml_(nvml), pid_(pid) {}

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

bool NativeMemoryMeter::Measure(NativeCharges& charges, const std::function<void()>& stretch,
                                std::chrono::milliseconds wait_for) {
  const int ordinal = charges.ordinal_;
  if (nvml_ == nullptr || !charges.active() || ordinal < 0 || ordinal >= kMaxDevices) {
    stretch();
    return true;
  }
  std::unique_lock<std::timed_mutex> lock(device_mu_[ordinal], std::defer_lock);
  const bool locked =
      wait_for.count() == 0 ? lock.try_lock() : lock.try_lock_for(wait_for);
  if (!locked) {
    stretch();
    return false;
  }
  const std::optional<int64_t> before = ProcessBytes(ordinal);
  const int64_t pool_before = PoolReserved(ordinal);
  stretch();
  if (!before) return true;
  const std::optional<int64_t> after = ProcessBytes(ordinal);
  if (!after) return true;
  const int64_t growth = (*after - *before) - (PoolReserved(ordinal) - pool_before);
  if (growth < kMinimumCharge) return true;
  charges.keys_.push_back(std::make_unique<char>());
  ledger_->RecordAllocation(charges.keys_.back().get(), static_cast<size_t>(growth),
                            Device::Cuda(ordinal), charges.owner_);
  charges.bytes_ += growth;
  totals_[ordinal].fetch_add(growth);
  return true;
}

void NativeMemoryMeter::Release(NativeCharges& charges) {
  for (const auto& key : charges.keys_) ledger_->RecordFree(key.get());
  charges.keys_.clear();
  if (charges.ordinal_ >= 0 && charges.ordinal_ < kMaxDevices) {
    totals_[charges.ordinal_].fetch_sub(charges.bytes_);
  }
  charges.bytes_ = 0;
}

int64_t NativeMemoryMeter::Total(int ordinal) const {
  if (ordinal < 0 || ordinal >= kMaxDevices) return 0;
  return totals_[ordinal].load();
}

}  // namespace vramd::memory
