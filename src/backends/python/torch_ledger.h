// torch's CUDA memory through vramd's ledger, for KIND_GPU instances of models that use torch:
// each such instance gets a torch.cuda.MemPool of its own, backed by one process-wide
// torch.cuda.memory.CUDAPluggableAllocator over the two functions this library exports,
//   void* vramd_torch_malloc(ssize_t size, int device, void* stream);
//   void  vramd_torch_free(void* ptr, ssize_t size, int device, void* stream);
// which call VramdServerApi::allocate (GPU `device`, on the default stream: every instance's
// segments share the server pool's space, and a free first waits for `stream`, torch_ledger.cc)
// and free, and the instance's initialize, execute and finalize allocate to the pool (torch._C's
// _cuda_beginAllocateCurrentThreadToPool around the call, which is what use_mem_pool does),
// on a CUDA stream of the instance's own unless VRAMD_PYTHON_TORCH_INSTANCE_STREAM is off
// (TorchInstance in resources/vramd_python_host.py).
//
// Per instance, not per model: an instance's weights and workspaces are then charged to it, as
// the ledger's instance owner stands for them, and one instance's cached blocks are never handed
// to another (which would blur whose memory is whose); the cost is one cache per instance, as
// Triton's process per instance has.
//
// Owner: torch's caching allocator keeps what a request freed cached in the pool's segments, and
// those segments are what reach vramd_torch_malloc. A segment outlives the request that made it
// by design, so every segment is charged to the instance (never to a request: it would read as
// that request's leak). A request's temporaries are then not charged one by one; they are back
// in the pool when it ends, and what a model keeps (tensors appended to a list) makes the pool
// grow: the instance's live bytes rise request after request, which is what the growth detector
// reports. The pool is dropped after finalize, which returns its cached segments (torch's
// ~MemPool empties it); tensors still alive keep theirs, reported as the instance's leak.
//
// When it does nothing (logged once per reason): the instance is KIND_CPU; the model's
// parameter VRAMD_PYTHON_LEDGER_TORCH is "off"; torch is not installed; torch has no CUDA (a
// CPU-only build, or no device); torch has no torch.cuda.MemPool or no
// _cuda_beginAllocateCurrentThreadToPool (before 2.8, e.g. 1.13). An async execute's coroutine
// runs on the instance's asyncio thread, outside the pool: its allocations stay in torch's
// default pool.
//
// Threads: TorchPool and TorchPoolCall need the GIL; the exported functions are called by torch
// on any thread.
#ifndef VRAMD_BACKENDS_PYTHON_TORCH_LEDGER_H_
#define VRAMD_BACKENDS_PYTHON_TORCH_LEDGER_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "context.h"

namespace vramd::python {

// The instance's pool (a torch.cuda.MemPool), or None when it does nothing (see above).
// Needs the GIL.
pybind11::object TorchPool(const ModelShared& model, bool gpu_instance, int32_t device,
                           const std::string& instance);

// fn(*args) allocating to the pool (and on the instance's stream, if it has one: the
// TorchInstance of vramd_python_host.py); fn(*args) when `pool` is None.
// Needs the GIL.
pybind11::object TorchPoolCall(const pybind11::object& pool, int32_t device,
                               const pybind11::object& fn, const pybind11::tuple& args);

// Live segments vramd_torch_malloc handed out (tests, logs).
uint64_t TorchLedgerLiveSegments();

}  // namespace vramd::python

#endif  // VRAMD_BACKENDS_PYTHON_TORCH_LEDGER_H_
