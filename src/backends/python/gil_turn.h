// ExecuteGil: the GIL as an execute takes it, handed between the backend's threads without a
// sleep when the machine has cores to spare.
//
// Why: when a thread releases the GIL while another waits for it in CPython, the waiter sleeps
// on a condition variable and must be woken (a futex wake, and in a virtual machine an idle vCPU
// brought back), while the releaser, back from sending its responses, often takes the GIL again
// before the waiter has run. So two in-process instances of a short model served fewer requests
// than one on the H200 (docs/benchmarks.md, run 15: 42.6 k against 52.2 k req/s at 16 clients).
//
// How: while a thread holds the GIL for an execute, a process-wide word holds the time it took
// it. A thread about to take the GIL for an execute first polls that word, for at most the spin
// budget and only while the holder took it less than the budget ago; it then takes a GIL that is
// (almost always) free, without sleeping in CPython's wait. A holder past the budget (a long
// execute, or one whose GIL was released inside a library, e.g. torch during a kernel, while the
// word still says held) is waited for in CPython's way at once: the spin never delays a thread by
// more than the budget and never spins behind a long execute.
//
// The budget: 50 us on a machine of 8 or more hardware threads, none on smaller ones (where the
// spinning thread takes the core the holder needs); VRAMD_PYTHON_GIL_SPIN_US sets it (0: none).
// Measured on the H200 (docs/benchmarks.md, run 16): the python identity at 16 clients with two
// instances, 39.7 k req/s without it, 73.9 k with 50 us, 70-75 k with 20 us and with four instances.
//
// Threads: any; one ExecuteGil per thread at a time (it takes the GIL).
#ifndef VRAMD_BACKENDS_PYTHON_GIL_TURN_H_
#define VRAMD_BACKENDS_PYTHON_GIL_TURN_H_

#include <cstdint>
#include <optional>

#include "interpreter.h"

namespace vramd::python {

// The spin budget in nanoseconds (read once from the environment).
int64_t GilSpinBudgetNs();

class ExecuteGil {
 public:
  ExecuteGil();
  ~ExecuteGil();
  ExecuteGil(const ExecuteGil&) = delete;
  ExecuteGil& operator=(const ExecuteGil&) = delete;

 private:
  std::optional<ScopedGil> gil_;
  int64_t mark_ = 0;  // the word's value while this holds the GIL
};

}  // namespace vramd::python

#endif  // VRAMD_BACKENDS_PYTHON_GIL_TURN_H_
