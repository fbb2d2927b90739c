// LibTorch's memory in vramd's ledger.
//
// LibTorch allocates through two process-wide allocators: the CPU allocator and, in a CUDA
// build, the CUDA caching allocator. This backend replaces both (once per process, before
// LibTorch first touches CUDA) with allocators that take every byte from vramd through
// VramdServerApi::allocate, charged to the owner the calling thread is working for: the version
// while a module loads, the instance while it executes. vramd's own pools do the caching, so
// nothing stays in a LibTorch cache after an unload and `unattributed` stays where it was.
//
// Threads carry their charge in a ChargeScope. An allocation made outside any scope (a LibTorch
// worker thread, say) is charged through any live model with no explicit owner; a CPU
// allocation with no model at all falls back to LibTorch's own CPU allocator.
//
// Thread safety: everything here is safe from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <shared_mutex>
#include <string>

#include "vramd/backend.h"

namespace vramd::pytorch {

// One model's way back to vramd: its VramdServerApi, valid from model_create until
// model_destroy returns. Allocations remember the link they were made through, so that each is
// freed through a table that is still valid.
class ServerLink {
 public:
  explicit ServerLink(const VramdServerApi* api, std::string model_name);
  ServerLink(const ServerLink&) = delete;
  ServerLink& operator=(const ServerLink&) = delete;
  // Called at the end of model_destroy: waits for calls through the table in progress, and
  // none starts after it. Allocations still live are freed through another live model's table
  // from then on, or stay allocated when there is none.
  void Close();

  // Runs `call(api)` while the table is valid and returns true; false, running nothing, once
  // Close() ran. Calls from many threads run side by side (each execution allocates through
  // its model's link), so this takes a shared lock only.
  template <typename Call>
  bool WithApi(Call&& call) const {
    std::shared_lock lock(mu_);
    if (!live_) return false;
    call(api_);
    return true;
  }

  const std::string& model_name() const { return model_name_; }
  bool live() const {
    std::shared_lock lock(mu_);
    return live_;
  }

 private:
  const VramdServerApi* const api_;
  const std::string model_name_;
  mutable std::shared_mutex mu_;
  bool live_ = true;  // guarded by mu_
};

// Charges the calling thread's LibTorch allocations to `owner` through `link` until destroyed.
// Scopes nest; the innermost wins.
class ChargeScope {
 public:
  ChargeScope(std::shared_ptr<ServerLink> link, VramdOwner owner);
  ~ChargeScope();
  ChargeScope(const ChargeScope&) = delete;
  ChargeScope& operator=(const ChargeScope&) = delete;

  const std::shared_ptr<ServerLink>& link() const { return link_; }
  VramdOwner owner() const { return owner_; }

 private:
  std::shared_ptr<ServerLink> link_;
  VramdOwner owner_;
  const ChargeScope* outer_;
};

// Registers and unregisters a model's link with the allocators (for the no-scope fallback).
void AddLiveLink(const std::shared_ptr<ServerLink>& link);
void RemoveLiveLink(const ServerLink* link);

// Installs the ledger allocators, once per process; later calls return the first result.
// Returns a warning (empty when all is well) naming what could not be installed: the CUDA side
// fails when LibTorch had already initialized its CUDA allocator, and is absent when this
// LibTorch has no pluggable allocator. The backend still works then, with LibTorch's GPU
// memory outside the ledger (it shows as `unattributed`).
const std::string& InstallLedgerAllocators();

// What LibTorch holds now that was charged through `link`: counted at model_destroy to report
// what a model's LibTorch state kept beyond its module.
struct LiveUsage {
  size_t allocations = 0;
  size_t bytes = 0;
};
LiveUsage LiveUsageOf(const ServerLink* link);

// Charges `to`, from now on, every live allocation made through `link` for `from` (through
// VramdServerApi::recharge; nothing moves with a server too old to have it). Returns how many
// moved. For what an instance's executions left alive in LibTorch state that the version's
// instances share (a tensor a module keeps in itself), so that the instance can go without a
// leak report: what is still alive when the version goes is reported there.
size_t RechargeLeftovers(const ServerLink* link, VramdOwner from, VramdOwner to);

// Frees one allocation made through a ledger allocator (what the deleters call); false when
// `ptr` is not one (it came from the allocator LibTorch had before).
bool FreeLedgerAllocation(void* ptr);

}  // namespace vramd::pytorch
