#include "interpreter.h"

#include <dlfcn.h>
#include <pybind11/embed.h>

#include <filesystem>
#include <mutex>

#include "common.h"
#include "module.h"

namespace vramd::python {
namespace {

struct StartResult {
  bool ok = false;
  std::string error;
};

// vramd opens backend libraries RTLD_LOCAL, and libpython comes in as this library's dependency,
// so its symbols would stay hidden from the extension modules Python imports later (numpy's
// .so files expect them global, as in the python3 executable). Reopening it RTLD_GLOBAL |
// RTLD_NOLOAD promotes the loaded copy.
std::string PromoteLibpython() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&Py_IsInitialized), &info) == 0 || info.dli_fname == nullptr) {
    return "cannot find libpython (dladdr failed)";
  }
  if (dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD) == nullptr) {
    const char* text = dlerror();
    return std::string("cannot make ") + info.dli_fname + " global: " + (text ? text : "?");
  }
  return "";
}

StartResult Start() {
  StartResult result;
  std::string dir = LibraryDirectory();
  for (const char* file : {"triton_python_backend_utils.py", "vramd_python_host.py"}) {
    if (!std::filesystem::exists(std::filesystem::path(dir) / file)) {
      result.error = "the python backend's " + std::string(file) + " is missing beside " +
                     "libvramd_python.so in " + dir;
      return result;
    }
  }
  if (std::string e = PromoteLibpython(); !e.empty()) {
    result.error = "python backend: " + e;
    return result;
  }
  if (Py_IsInitialized()) {
    result.error = "python backend: an interpreter is already running in this process";
    return result;
  }
  if (PyImport_AppendInittab("c_python_backend_utils", &InitUtilsModule) != 0) {
    result.error = "python backend: cannot register the module c_python_backend_utils";
    return result;
  }
  try {
    // No signal handlers (the server owns SIGINT), nothing of the working directory on
    // sys.path.
    py::initialize_interpreter(/*init_signal_handlers=*/false, 0, nullptr,
                               /*add_program_dir_to_path=*/false);
    {
      py::module_ sys = py::module_::import("sys");
      // Some libraries read sys.argv[0]; an embedded interpreter has only "".
      py::list argv;
      argv.append("vramd");
      sys.attr("argv") = argv;
      sys.attr("path").attr("append")(dir);
      py::module_::import("vramd_python_host");
      py::module_::import("c_python_backend_utils");
    }
  } catch (const py::error_already_set& e) {
    result.error = "python backend: the interpreter started but its setup failed: " +
                   TracebackText(e);
    PyEval_SaveThread();
    return result;
  } catch (const std::exception& e) {
    result.error = std::string("python backend: cannot start the interpreter: ") + e.what();
    if (Py_IsInitialized() && PyGILState_Check()) PyEval_SaveThread();
    return result;
  }
  // Hand the GIL back for good: every entry point takes it when it needs it.
  PyEval_SaveThread();
  result.ok = true;
  return result;
}

}  // namespace

std::string LibraryDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&LibraryDirectory), &info) == 0 || info.dli_fname == nullptr) {
    return ".";
  }
  return std::filesystem::path(info.dli_fname).parent_path().string();
}


bool StartInterpreter(std::string* error) {
  static std::once_flag once;
  static StartResult* result = nullptr;  // never freed: lives as long as the interpreter
  std::call_once(once, [] { result = new StartResult(Start()); });
  if (!result->ok && error != nullptr) *error = result->error;
  return result->ok;
}

}  // namespace vramd::python
