// CrashReport: on a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) a vramd process writes
// which signal, the faulting address, the thread's name and a native backtrace to stderr, then
// dies of the same signal, so that exit status and core dumps are what they would have been.
//
// Why the server needs one: a crash inside a backend (LibTorch, a model.py's native extension)
// otherwise ends the process with nothing but "Segmentation fault" from the shell, and on the GPU
// machine there is no gdb to ask. Backtraces name exported symbols as `lib.so(func+0x1c)` and the
// rest as `lib.so(+0x1c3a)`, which addr2line resolves against the same build.
//
// Python's faulthandler (PYTHONFAULTHANDLER=1) chains to this handler: it writes the Python
// tracebacks of every thread first, then re-raises, and this report follows.
#ifndef VRAMD_CORE_CRASH_REPORT_H_
#define VRAMD_CORE_CRASH_REPORT_H_

namespace vramd {

// Installs the handlers for the process; `program` (a string literal: it is kept) starts each
// line of the report. Call once, early in main, before other threads start.
void InstallCrashReport(const char* program);

}  // namespace vramd

#endif  // VRAMD_CORE_CRASH_REPORT_H_
