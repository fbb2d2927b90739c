// Diagnostics for where forward()'s time goes, shared by the backend (VRAMD_PYTORCH_PROFILE=1,
// VRAMD_PYTORCH_OP_STATS=1) and bench/torch/direct_bench (--profile), so that both sides of the
// throughput comparison are measured by the same code. Nothing here runs unless asked for.
#pragma once

#include <cstddef>
#include <string>

namespace vramd::pytorch::probe {

// The calling thread's CPU time and context switches so far. A call whose wall time is far
// above its CPU time was blocked (a lock, a sleep in a synchronization), not slow.
struct ThreadUsage {
  double cpu_us = 0;
  long voluntary_switches = 0;    // the thread gave the CPU up (waited)
  long involuntary_switches = 0;  // the scheduler took it away
};
ThreadUsage ThreadUsageNow();

// Counts every LibTorch operator call in the process (through a RecordFunction callback) with
// its inclusive wall time on the calling thread, from the first StartOpStats() on. Nested
// operators are counted in their own row and in their callers'. The callback costs time itself,
// so compare only runs that both have it on.
void StartOpStats();
// The `top` operators with the most time since the last call, one per line:
// "<total us> <calls> <us per call> <name>", and resets the counts. Empty before StartOpStats().
std::string TakeOpStats(size_t top);

// The node kinds of the optimized graph the calling thread last ran through the TorchScript
// graph executor, with their counts ("aten::conv2d x20, prim::TensorExprGroup x8, ..."), fusion
// groups' subgraphs included; "none" when this thread ran no graph yet.
std::string LastGraphSummary();

}  // namespace vramd::pytorch::probe
