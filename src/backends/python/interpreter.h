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

}  // namespace vramd::python

#endif  // VRAMD_BACKENDS_PYTHON_INTERPRETER_H_
