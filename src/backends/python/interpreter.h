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
// measured with strace on the python identity model. REQUIRES: the GIL. Call it from threads
// that come back (vramd's instance threads), not from one-off ones.
void KeepThreadState();

}  // namespace vramd::python

#endif  // VRAMD_BACKENDS_PYTHON_INTERPRETER_H_
