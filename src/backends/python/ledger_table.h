// A model version's server table as the memory hooks see it (numpy_ledger.h, torch_ledger.h).
//
// Memory a model's code allocates through its VramdServerApi may be freed after the model is
// gone: an array kept by a module outside the model's package (sys.modules outlives every
// model), a torch segment released by another thread. By then the table no longer exists
// (vramd destroys it after model_destroy). A LedgerTable outlives it: ReleaseLedgerTable marks
// it gone, and a later free goes through any other live table instead (every table of a server
// allocates from its one allocator); with none left, the memory stays allocated and is counted
// (LedgerOrphanedFrees).
//
// Lifetime: a LedgerTable is never freed (one small record per model version ever loaded).
// Threads: every function is safe from any thread. A call through a table holds its lock shared,
// so ReleaseLedgerTable waits for calls in flight and none starts after it.
#ifndef VRAMD_BACKENDS_PYTHON_LEDGER_TABLE_H_
#define VRAMD_BACKENDS_PYTHON_LEDGER_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "vramd/backend.h"

namespace vramd::python {

struct LedgerTable;

// The record of `api` (a new one per call: made at model_create).
LedgerTable* AcquireLedgerTable(const VramdServerApi* api);
// At model_destroy, before the table goes: later calls through `table` use another live table.
void ReleaseLedgerTable(LedgerTable* table);

// VramdServerApi::allocate through `table`, charged to `owner`; null when `table` is gone or
// the allocation fails (*error, when given, says why).
void* LedgerAllocate(LedgerTable* table, VramdOwner owner, VramdDeviceKind kind, int32_t device,
                     size_t size, void* stream, VramdError* error);
// VramdServerApi::free through `table`, or another live table once `table` is gone.
void LedgerFree(LedgerTable* table, VramdDeviceKind kind, int32_t device, void* ptr);

// The server's message for the last allocation through a table that failed on this thread (a
// quota's refusal, a full device), cleared by taking it. numpy's MemoryError and torch's
// OutOfMemoryError name no cause: ErrorText adds this one to the exception a model raised.
std::string TakeLedgerFailure();
void ClearLedgerFailure();

// Frees that found no live table (the memory stays allocated).
uint64_t LedgerOrphanedFrees();

}  // namespace vramd::python

#endif  // VRAMD_BACKENDS_PYTHON_LEDGER_TABLE_H_
