// What the runtime needs from memory::: the ledger that owners are opened in, the allocator
// backends draw from, and the growth detector requests feed. Owned by the server; outlives
// every model.
#pragma once

#include <chrono>

#include "memory/admission.h"
#include "memory/allocator.h"
#include "memory/device_contexts.h"
#include "memory/growth_detector.h"
#include "memory/ledger.h"
#include "memory/native_memory.h"
#include "memory/nvml.h"

namespace vramd::runtime {

struct MemoryContext {
  memory::Ledger* ledger = nullptr;        // required
  memory::Allocator* allocator = nullptr;  // required
  memory::GrowthDetector* growth = nullptr;  // optional: no growth detection when null
  // Optional: the per-execute memory log (execute_memory_log.h) shows NVML's process figure
  // when set.
  const memory::Nvml* nvml = nullptr;
  // Optional: measures what GPU instances' libraries take outside the pools while they are
  // created and run their first executions, and charges it to them (native_memory.h).
  memory::NativeMemoryMeter* native = nullptr;
  // Optional: makes and measures each GPU's context before a version's first use of that GPU
  // (device_contexts.h); without it CUDA makes contexts on first use, unmeasured.
  memory::DeviceContexts* contexts = nullptr;
  // Optional: memory-aware admission of executions on devices with a budget (admission.h).
  memory::Admission* admission = nullptr;
  // The longest an execution waits for memory when none of its requests has an earlier
  // deadline.
  std::chrono::milliseconds admission_wait{30000};
};

}  // namespace vramd::runtime
