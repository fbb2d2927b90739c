// HostedProcesses: the backend host processes (backends/remote/stub.h) that serve models for
// this server, so that the memory report can show each one's device memory, as NVML sees it
// per PID, under the model it serves. A host's CUDA context and what its libraries take
// outside vramd's pools are in no ledger; without this they would be memory of an unknown
// process on the device (issue 14, item 7).
//
// Thread safety: every method is safe from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "memory/ledger.h"

namespace vramd::memory {

struct HostedProcess {
  uint32_t pid = 0;
  OwnerId owner = kNoOwner;  // the model version it serves
  std::string label;         // "model 'm' version 1 (GPU 0)"
};

class HostedProcesses {
 public:
  // Listed until destroyed.
  class Registration {
   public:
    ~Registration();
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;

   private:
    friend class HostedProcesses;
    Registration(HostedProcesses* list, uint64_t key) : list_(list), key_(key) {}
    HostedProcesses* const list_;
    const uint64_t key_;
  };

  std::unique_ptr<Registration> Add(HostedProcess process) EXCLUDES(mu_);
  // In the order they were added.
  std::vector<HostedProcess> List() const EXCLUDES(mu_);

  // The server's list (the stubs of every backend register here).
  static HostedProcesses& Global();

 private:
  void Remove(uint64_t key) EXCLUDES(mu_);

  mutable Mutex mu_;
  uint64_t next_key_ GUARDED_BY(mu_) = 1;
  std::map<uint64_t, HostedProcess> processes_ GUARDED_BY(mu_);
};

}  // namespace vramd::memory
