// The CUDA context of each GPU, made when something on that GPU is first used and measured
// then: a server whose models use GPU 1 has no context, and no memory, on GPU 0.
//
// A context costs device memory that no pool sees (hundreds of MiB on a large GPU). The memory
// report subtracts it from NVML's figure for this process, so it is read right after the
// context is made and before anything on that GPU allocates: Open is called first by
// everything that uses a GPU (a version's load for the GPUs of its instances, a pool's first
// segment, a client's CUDA shared memory region).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"
#include "core/thread_annotations.h"

namespace vramd::memory {

class Nvml;

// What NVML said this process used on a GPU right after its context was made: the context,
// the runtime's kernels loaded so far and driver bookkeeping.
//
// Caveats: kernels loaded later (CUDA 12 loads modules lazily by default) and libraries that
// allocate their own workspaces (cuBLAS, cuDNN) grow the process figure after the baseline, so
// they show as unattributed (or as a version's native memory where measured), which is what
// those figures are for.
struct ContextBaseline {
  int ordinal = 0;
  std::optional<int64_t> bytes;  // absent when it could not be measured, or no context exists
  std::string reason;            // why it is absent
};

class DeviceContexts {
 public:
  // How a context is made and measured: CUDA and NVML in the server (ForThisProcess), fakes in
  // tests.
  struct Hooks {
    std::function<int()> device_count;
    std::function<Status(int)> make_context;
    // This process's bytes on a GPU; null when NVML is unavailable (`no_figure_reason` says why).
    std::function<Result<uint64_t>(int)> process_used;
    std::string no_figure_reason;
  };
  static Hooks ForThisProcess(const Nvml* nvml, std::string nvml_unavailable_reason);

  explicit DeviceContexts(Hooks hooks) : hooks_(std::move(hooks)) {}
  DeviceContexts(const DeviceContexts&) = delete;
  DeviceContexts& operator=(const DeviceContexts&) = delete;

  // Makes GPU `ordinal`'s context unless it exists, and records its baseline. Safe from any
  // thread: the first call does it while later ones wait, then they return at once. A context
  // that cannot be made is Unavailable naming the GPU and CUDA's reason, and the next call
  // tries again; a context made but not measured is Ok (the baseline says why).
  Status Open(int ordinal) EXCLUDES(mu_);

  bool IsOpen(int ordinal) const EXCLUDES(mu_);

  // One entry per GPU this process sees, and per GPU opened beyond them: the baseline, or why
  // there is none ("no CUDA context yet: nothing has used cuda:N").
  std::vector<ContextBaseline> Baselines() const EXCLUDES(mu_);

 private:
  bool OpenedLocked(int ordinal) const REQUIRES(mu_);

  const Hooks hooks_;
  mutable Mutex mu_;
  std::vector<ContextBaseline> opened_ GUARDED_BY(mu_);
};

}  // namespace vramd::memory
