// ExecuteMemoryLog: one log line per execution with the memory figures before and after it, for
// a model whose config asks (no model code needed):
//
//   parameters { key: "VRAMD_LOG_EXECUTE_MEMORY" value { string_value: "1" } }
//
// "1", "true", "on" or "yes" turn it on; "0", "false", "off", "no" or absent leave it off;
// anything else fails the load naming the parameter. The line (at info level):
//
//   execute memory: model 'm' version 1 instance m_0_0, 2 request(s), 3.1 ms:
//     process (NVML) 812.0 -> 812.0 MiB; ledger instance 12.0 -> 16.0 MiB (+4.0),
//     all owners 1.00 -> 1.00 GiB; pools cpu 4.0/2.0 -> 4.0/2.5 MiB, cuda:0 ... (reserved/allocated)
//
// This is the per-execute log users of Triton's Python backend write into their model.py by
// hand to find out where memory goes (PROBLEM.md): NVML's figure for this process (what
// nvidia-smi shows: contexts, pools, and what libraries allocate outside vramd), the ledger's
// live bytes under the instance (what the execution added and kept) and in the whole server,
// and each pool's reserved and allocated bytes (cached memory that NVML counts and the ledger
// does not). NVML is left out where it is unavailable (no GPU, no driver), saying so.
//
// Cost: only where it is on (a few ledger and pool reads and, with a GPU, NVML queries per
// device, before and after each execution); nothing otherwise.
//
// Thread safety: Before and After are const and safe from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/model_config.pb.h"
#include "core/status.h"
#include "memory/ledger.h"
#include "runtime/memory_context.h"

namespace vramd::runtime {

inline constexpr const char* kExecuteMemoryLogParameter = "VRAMD_LOG_EXECUTE_MEMORY";

class ExecuteMemoryLog {
 public:
  // The log for a model, or nullopt when its config does not ask; InvalidArgument naming the
  // parameter for a value that is neither on nor off.
  static Result<std::optional<ExecuteMemoryLog>> From(const config::ModelConfig& config,
                                                      const MemoryContext& memory,
                                                      std::string where);

  struct Figures {
    std::optional<uint64_t> process_bytes;  // NVML, summed over the devices; none: unavailable
    int64_t instance_live = 0;
    int64_t server_live = 0;
    struct Pool {
      std::string device;
      size_t reserved = 0;
      size_t allocated = 0;
    };
    std::vector<Pool> pools;
    std::chrono::steady_clock::time_point at;
  };

  Figures Take(memory::OwnerId instance) const;
  // Logs the line for an execution of `requests` request(s) on `instance` (its ledger owner).
  void Log(memory::OwnerId instance, size_t requests, const Figures& before,
           const Figures& after) const;
  // The line itself (Log writes it), for tests.
  std::string Line(memory::OwnerId instance, size_t requests, const Figures& before,
                   const Figures& after) const;

 private:
  ExecuteMemoryLog(const MemoryContext& memory, std::string where)
      : memory_(memory), where_(std::move(where)) {}

  MemoryContext memory_;
  std::string where_;
};

}  // namespace vramd::runtime
