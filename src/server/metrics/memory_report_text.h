// The memory report (the JSON of GET /v2/memory) as text a person reads, for `vramctl memory`:
// devices with their NVML, pool, context and unattributed lines; the pools; the owner tree,
// indented, with live, peak and subtree bytes; the leaks with their allocations and backtraces.
// It works from the JSON rather than a MemoryReport so the client needs nothing but the text,
// and tolerates missing fields (an older or newer server) by leaving them out.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace vramd::metrics {

// InvalidArgument when `json` is not a JSON object.
Result<std::string> RenderMemoryReportText(std::string_view json);

// "512 B", "1.5 KiB", "2.0 MiB", "139.8 GiB", "-3.0 MiB": powers of 1024, one decimal.
std::string HumanBytes(int64_t bytes);

}  // namespace vramd::metrics
