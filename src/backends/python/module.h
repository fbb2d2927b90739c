// The init function of the built-in module c_python_backend_utils (module.cc).
#ifndef VRAMD_BACKENDS_PYTHON_MODULE_H_
#define VRAMD_BACKENDS_PYTHON_MODULE_H_

#include <Python.h>

namespace vramd::python {

// For PyImport_AppendInittab, before the interpreter starts; needs the GIL when called.
PyObject* InitUtilsModule();

}  // namespace vramd::python

#endif  // VRAMD_BACKENDS_PYTHON_MODULE_H_
