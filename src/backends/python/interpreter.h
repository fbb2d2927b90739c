// The one embedded CPython interpreter of the server process.
//
// Started once, by the first model_create (StartInterpreter), and never finalized: neither at
// model unload nor at process exit (extension modules such as torch do not survive a
// finalize/re-initialize, and Triton-like servers do not finalize either). After start the GIL is
// released; every entry point takes it with py::gil_scoped_acquire and releases it while vramd
// waits (a BLS call waiting for its result, a response being sent).
//
// The directory of libvramd_python.so (where triton_python_backend_utils.py and
// vramd_python_host.py lie beside it) is appended to sys.path, as Triton appends its backend
// directory.
//
// Threads: StartInterpreter is safe from any thread (once); call it without the GIL.
#ifndef VRAMD_BACKENDS_PYTHON_INTERPRETER_H_
#define VRAMD_BACKENDS_PYTHON_INTERPRETER_H_

#include <pybind11/pybind11.h>

#include <string>

namespace vramd::python {

// Starts the interpreter if it is not running. False with *error when it cannot start (the
// resources are missing, libpython failed); the failure is kept and returned again.
bool StartInterpreter(std::string* error);

// The directory this library was loaded from.
std::string LibraryDirectory();

// Keeps the calling thread's Python thread state until the thread ends. pybind11 deletes a
// thread's PyThreadState when its outermost gil_scoped_acquire ends, so a thread that enters
// Python once per request (an instance thread) would build and free one each time, with its
// frame stack: an mmap and a munmap (and the TLB shootdown on every core) per request,
// measured with strace on the python identity model. REQUIRES: the GIL. Every entry point
// calls it through ScopedGil; a thread's state is deleted when the thread ends.
void KeepThreadState();

// The GIL, taken the one way every entry point of the backend takes it: with the calling
// thread's thread state kept for the thread's life (KeepThreadState). Why every thread, not
// only instance threads: on the H200, torch's lazy CUDA init (the gil_scoped_acquire in
// torch::utils::device_lazy_init) crashed in PyEval_AcquireThread on a model-loading thread that
// had entered and left Python before, i.e. with a thread state that pybind11 had made and
// deleted (or aborted in free() there): 13 of 14 server starts with python identity models
// loading beside a torch model.py, against 0 of 14 with every thread keeping its state
// (tests/device/python_load_loop.py --with-identity, docs/benchmarks.md). The suspected reader
// of the deleted state is the process's second copy of pybind11 (torch's, with internals of
// its own). One state per thread, never deleted while the thread lives, leaves none to find.
class ScopedGil {
 public:
  ScopedGil() { KeepThreadState(); }
  ScopedGil(const ScopedGil&) = delete;
  ScopedGil& operator=(const ScopedGil&) = delete;

 private:
  pybind11::gil_scoped_acquire gil_;
};

}  // namespace vramd::python

#endif  // VRAMD_BACKENDS_PYTHON_INTERPRETER_H_
