#include "ledger_table.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <utility>
#include <vector>

namespace vramd::python {

struct LedgerTable {
  std::shared_mutex mu;
  const VramdServerApi* api = nullptr;  // null once released; guarded by mu
};

namespace {

std::mutex& TablesMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::vector<LedgerTable*>& Tables() {  // the live tables
  static auto* tables = new std::vector<LedgerTable*>;
  return *tables;
}
std::atomic<uint64_t> orphaned_frees{0};
thread_local std::string t_failure;  // TakeLedgerFailure

}  // namespace

LedgerTable* AcquireLedgerTable(const VramdServerApi* api) {
  auto* table = new LedgerTable;  // never freed (ledger_table.h)
  table->api = api;
  std::lock_guard<std::mutex> lock(TablesMutex());
  Tables().push_back(table);
  return table;
}

void ReleaseLedgerTable(LedgerTable* table) {
  if (table == nullptr) return;
  {
    std::unique_lock<std::shared_mutex> lock(table->mu);
    table->api = nullptr;
  }
  std::lock_guard<std::mutex> lock(TablesMutex());
  auto& tables = Tables();
  for (auto it = tables.begin(); it != tables.end(); ++it) {
    if (*it == table) {
      tables.erase(it);
      break;
    }
  }
}

void* LedgerAllocate(LedgerTable* table, VramdOwner owner, VramdDeviceKind kind, int32_t device,
                     size_t size, void* stream, VramdError* error) {
  if (table == nullptr) return nullptr;
  std::shared_lock<std::shared_mutex> lock(table->mu);
  if (table->api == nullptr) return nullptr;
  VramdError local{};
  VramdError* said = error != nullptr ? error : &local;
  void* out = nullptr;
  if (table->api->allocate(table->api->server, owner, kind, device, size, stream, &out, said) !=
      VRAMD_OK) {
    t_failure.assign(said->message, strnlen(said->message, sizeof said->message));
    return nullptr;
  }
  return out;
}

std::string TakeLedgerFailure() { return std::exchange(t_failure, std::string()); }
void ClearLedgerFailure() { t_failure.clear(); }

void LedgerFree(LedgerTable* table, VramdDeviceKind kind, int32_t device, void* ptr) {
  if (ptr == nullptr) return;
  if (table != nullptr) {
    std::shared_lock<std::shared_mutex> lock(table->mu);
    if (table->api != nullptr) {
      table->api->free(table->api->server, kind, device, ptr);
      return;
    }
  }
  // The rare path: the allocating model is gone.
  std::lock_guard<std::mutex> registry(TablesMutex());
  for (LedgerTable* other : Tables()) {
    std::shared_lock<std::shared_mutex> lock(other->mu);
    if (other->api != nullptr) {
      other->api->free(other->api->server, kind, device, ptr);
      return;
    }
  }
  orphaned_frees.fetch_add(1, std::memory_order_relaxed);
}

uint64_t LedgerOrphanedFrees() { return orphaned_frees.load(std::memory_order_relaxed); }

}  // namespace vramd::python
