// Sizes as people write them: how vramd's messages print byte counts, and how configs and flags
// give them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace vramd::memory {

// "512 B", "1.5 KiB", "3.0 MiB", "1.25 GiB": how the pools', the allocator's and the ledger's
// messages write sizes.
std::string FormatBytes(size_t bytes);

// Bytes ("1048576") or a number with B, KiB, MiB, GiB or TiB ("1.5GiB", "512 MiB"): the count,
// from 1 byte to 8 EiB. InvalidArgument naming `text` otherwise.
Result<int64_t> ParseByteSize(std::string_view text);

}  // namespace vramd::memory
