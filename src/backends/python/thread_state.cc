// KeepThreadState (interpreter.h), apart from the interpreter's start so that the test-only
// extension module (tests/python/build_pb_tensor_ext.sh), which has no embedded interpreter,
// links it with pb_tensor.cc.
#include <Python.h>

#include "interpreter.h"

namespace vramd::python {

namespace {
bool Finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}
}  // namespace

void KeepThreadState() {
  struct Kept {
    // The GIL is held: this only counts one more user of the thread's state.
    Kept() { PyGILState_Ensure(); }
    // At the thread's end: take the GIL with the kept state and release the last count, which
    // clears and deletes the state (and hands the GIL back). The interpreter is never
    // finalized (interpreter.h), but a thread ending during process exit must not touch it.
    ~Kept() {
      if (!Py_IsInitialized() || Finalizing()) return;
      PyThreadState* state = PyGILState_GetThisThreadState();
      if (state == nullptr) return;
      PyEval_RestoreThread(state);
      PyGILState_Release(PyGILState_UNLOCKED);
    }
  };
  thread_local Kept kept;
}

}  // namespace vramd::python
