#include "runtime/request_owner.h"

#include <spdlog/spdlog.h>

namespace vramd::runtime {

RequestOwner::RequestOwner(const MemoryContext& memory, memory::OwnerId instance, std::string name)
    : memory_(memory),
      open_(true),
      instance_(instance),
      owner_(memory.ledger, instance, memory::OwnerKind::kRequest, std::move(name)) {}

RequestOwner::~RequestOwner() { Finish(); }

RequestOwner::RequestOwner(RequestOwner&& other) noexcept { *this = std::move(other); }

RequestOwner& RequestOwner::operator=(RequestOwner&& other) noexcept {
  if (this != &other) {
    Finish();
    memory_ = other.memory_;
    open_ = std::exchange(other.open_, false);
    instance_ = std::exchange(other.instance_, memory::kNoOwner);
    owner_ = std::move(other.owner_);
  }
  return *this;
}

void RequestOwner::Finish() {
  if (!open_) return;
  const bool allocated = owner_.opened();
  owner_.Close();  // leaks are filed and logged by the ledger's callback
  // What it held (its outputs, once the reply is written) is free: executions waiting for
  // memory look again.
  if (allocated && memory_.admission != nullptr) memory_.admission->MemoryFreed();
  if (allocated && memory_.growth != nullptr) {
    auto live = memory_.ledger->SubtreeLiveBytes(instance_);
    if (live.ok()) {
      if (auto growth = memory_.growth->Observe(instance_, *live)) {
        spdlog::warn(
            "memory growth: {} rose on {} consecutive requests, from {} to {} bytes live",
            memory_.ledger->OwnerPath(instance_), growth->consecutive_rises, growth->from_bytes,
            growth->to_bytes);
      }
    }
  }
  open_ = false;
}

}  // namespace vramd::runtime
