// numpy's array data through vramd's ledger: a NumPy data-memory handler (NEP 49, numpy >=
// 1.22) whose malloc / calloc / realloc / free allocate host memory with
// VramdServerApi::allocate, charged to the owner of the model code that runs:
//   - while model.py is imported: the version (VramdModelInfo::owner);
//   - initialize and finalize: the instance (VramdInstanceInfo::owner): what initialize keeps
//     on `self` is the instance's; a module global filled there that outlives the instance is
//     reported as the instance's leak (VramdServerApi::recharge is how to move it);
//   - execute: the first request of the list (VramdRequest::owner), as the runtime charges a
//     joined batch to its first request; for a decoupled model the instance, since its
//     requests end whenever the model sends the final flag, usually while the arrays it sent
//     are still referenced by its own locals (they would read as leaks of every request);
//   - code without a context (a thread the model started, to which a context was copied):
//     numpy's default allocation, uncharged.
// An array still alive when its owner closes (kept in self.history) is then a leak naming the
// request, and the instance's live bytes rise with it (the growth detector).
//
// Small arrays stay out (a documented trade-off): data under kNumpyLedgerMinBytes (512) comes
// from malloc, uncharged, unless the model's parameter VRAMD_PYTHON_LEDGER_NUMPY_MIN_BYTES says
// otherwise ("0" charges every array). Measured with bench/python/numpy_ledger_cost.py
// (2026-12-02, best of 5-9 rounds, noisy machines): np.empty + free costs 140-270 ns with
// numpy's allocator and 440-800 ns through the ledger on the 2-core build host (numpy 1.24),
// 240-510 ns and 880-1050 ns on the H200 host (numpy 2.5): +250 to +750 ns per array. The
// server's pool also rounds every block up to 512 bytes (plus this handler's 64-byte header): a
// 16-byte array would hold 512. A model that keeps many arrays under 512 bytes each is then not
// seen by the ledger.
//
// The handler is context-local in numpy (a ContextVar): NumpyLedgerScope makes it current around
// each call into a model and restores the previous one after; InstallNumpyLedger makes it
// current for good (an instance's asyncio thread, whose tasks copy its context). numpy stores
// the handler with each array, so an array made under this handler is freed by it, wherever
// it is freed, and arrays made under any other handler never reach it. Each block carries a
// small header (its size, the table it came from, which allocator), so realloc and free need
// neither numpy's size argument nor a lookup.
//
// Built only when numpy's headers were found (VRAMD_PYTHON_NUMPY); otherwise everything here
// does nothing. A model turns it off with parameter VRAMD_PYTHON_LEDGER_NUMPY "off".
//
// Threads: the scope and InstallNumpyLedger need the GIL; the handler's functions are called by
// numpy (with the GIL) on any thread.
#ifndef VRAMD_BACKENDS_PYTHON_NUMPY_LEDGER_H_
#define VRAMD_BACKENDS_PYTHON_NUMPY_LEDGER_H_

#include <Python.h>

#include <cstddef>

#include "context.h"

namespace vramd::python {

// Below this many bytes an array's data comes from malloc, uncharged (the default of
// ModelShared::numpy_min_bytes).
inline constexpr size_t kNumpyLedgerMinBytes = 512;

// Whether the library was built with the handler.
bool NumpyLedgerBuilt();

class NumpyLedgerScope {
 public:
  // Makes the handler current when `model` has it on (and numpy's C API loads; the first
  // failure is logged once and turns the handler off for the process).
  explicit NumpyLedgerScope(const ModelShared& model);
  ~NumpyLedgerScope();
  NumpyLedgerScope(const NumpyLedgerScope&) = delete;
  NumpyLedgerScope& operator=(const NumpyLedgerScope&) = delete;

 private:
  bool active_ = false;
  PyObject* previous_ = nullptr;  // the handler it replaced (a new reference)
};

// Makes the handler current in the calling thread's context for good, when `model` has it on.
void InstallNumpyLedger(const ModelShared& model);

// InstallNumpyLedger once per thread: for an instance's own thread, which runs no Python but
// that instance's executes (outside a call context the handler allocates with malloc,
// uncharged, so leaving it current changes nothing there). Setting numpy's ContextVar and
// restoring it around each execute, as NumpyLedgerScope does, cost 3.7% of the python
// identity model's instance thread.
void KeepNumpyLedger(const ModelShared& model);

}  // namespace vramd::python

#endif  // VRAMD_BACKENDS_PYTHON_NUMPY_LEDGER_H_
