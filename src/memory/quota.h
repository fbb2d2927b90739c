// Memory quotas: a bound on the bytes one owner's subtree may hold on a device.
//
// A quota is given when its owner opens (Ledger::OpenOwner) and every owner opened below it
// inherits it, so a model version's quota bounds its instances and their requests together.
// The ledger counts what the subtree holds per device as it charges and frees; an allocation
// that would pass a limit is refused before any memory is made (Ledger::Charge), and nothing
// else is touched: other owners, and other devices of the same owner, go on as before.
//
// Quotas nest: an owner opened with its own quota below another's is bounded by both (and the
// server's budget, the root's quota, bounds every owner). Memory recorded without an allocation the server makes (RecordAllocation: an
// import, a framework's own) and recharges are counted, never refused: they exist already.
//
// Thread safety: values; every function is safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "memory/byte_size.h"
#include "memory/device.h"

namespace vramd::memory {

struct QuotaLimit {
  // cpu, cuda:N, cuda_host; or every GPU, each bounded alone (kCuda with index kEveryGpu).
  Device device;
  int64_t bytes = 0;  // > 0
};
inline constexpr int kEveryGpu = -1;

// Empty: no quota. A limit of 0 bytes bounds nothing: the owner's use is counted (and its
// peaks, Ledger::MarkPeaks), as MeasurePeaks() asks.
using MemoryQuota = std::vector<QuotaLimit>;
inline MemoryQuota MeasurePeaks() { return {QuotaLimit{Device::Cpu(), 0}}; }

// "2GiB" bounds each GPU; "cuda:0=2GiB,cuda:1=512MiB,cpu=1GiB" names devices. Sizes are bytes
// ("1048576") or a number with KiB, MiB, GiB or TiB ("1.5GiB"). InvalidArgument naming what is
// wrong in `text`.
Result<MemoryQuota> ParseMemoryQuota(std::string_view text);
// The limit that applies to `device`, 0 for none.
int64_t QuotaLimitFor(const MemoryQuota& quota, Device device);
// "cuda:0", "cpu"...; "cuda:*" for the limit on each GPU.
std::string QuotaDeviceName(Device device);
// "cuda:0=2.0 GiB, cpu=1.0 GiB" (each GPU: "cuda:*=2.0 GiB").
std::string FormatMemoryQuota(const MemoryQuota& quota);

}  // namespace vramd::memory
