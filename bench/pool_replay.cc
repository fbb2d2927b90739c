// pool_replay: replays a recorded allocation trace against vramd's CachingPool and reports what
// the pool would hold, so that a pool policy can be judged on a real model's pattern without a
// GPU. Traces come from the pytorch backend (VRAMD_PYTORCH_TRACE_ALLOCATIONS=<file>, one line
// per event: "A|F <ptr> <bytes> <cpu|gpu> <device> <stream> <owner>"). GPU events replay into a
// host-memory pool with the same policy, keeping each allocation's stream, so the figures are
// the pool's bookkeeping, not a device's.
//   pool_replay TRACE
// Prints, per (kind, device): reserved at the end, peak reserved, peak of the live requested
// bytes, segments, and the number of streams seen.
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>

#include "memory/caching_pool.h"
#include "memory/segment_source.h"

namespace {

struct Replay {
  std::unique_ptr<vramd::memory::CachingPool> pool =
      std::make_unique<vramd::memory::CachingPool>(vramd::memory::MakeHostSegmentSource());
  std::map<std::string, std::pair<void*, size_t>> live;  // traced pointer -> ours, bytes
  std::set<std::string> streams;
  size_t live_bytes = 0, peak_live_bytes = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: pool_replay TRACE\n");
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::fprintf(stderr, "pool_replay: cannot read %s\n", argv[1]);
    return 2;
  }
  std::map<std::pair<std::string, int>, Replay> pools;
  std::map<std::string, std::pair<std::string, int>> pool_of;  // traced pointer -> its pool
  std::string line;
  long events = 0, skipped = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string op, ptr, kind, stream;
    size_t bytes = 0;
    int device = -1;
    if (!(fields >> op >> ptr >> bytes >> kind >> device >> stream)) {
      ++skipped;
      continue;
    }
    ++events;
    if (op == "A") {
      auto key = std::make_pair(kind, device);
      Replay& r = pools[key];
      // The trace's stream handles are only names here: each becomes a distinct StreamId.
      r.streams.insert(stream);
      const auto id = static_cast<vramd::memory::StreamId>(std::hash<std::string>{}(stream) | 1);
      auto p = r.pool->Allocate(bytes == 0 ? 1 : bytes, stream == "(nil)" ? 0 : id);
      if (!p.ok()) {
        std::fprintf(stderr, "pool_replay: %s\n", p.status().message().c_str());
        return 1;
      }
      r.live[ptr] = {*p, bytes};
      pool_of[ptr] = key;
      r.live_bytes += bytes;
      r.peak_live_bytes = std::max(r.peak_live_bytes, r.live_bytes);
    } else {
      auto owner = pool_of.find(ptr);
      if (owner == pool_of.end()) continue;  // allocated before the trace began
      Replay& r = pools[owner->second];
      auto it = r.live.find(ptr);
      r.pool->Free(it->second.first);
      r.live_bytes -= it->second.second;
      r.live.erase(it);
      pool_of.erase(owner);
    }
  }
  constexpr double kMiB = 1024.0 * 1024.0;
  std::printf("%ld events (%ld unreadable lines)\n", events, skipped);
  for (auto& [key, r] : pools) {
    const auto s = r.pool->Stats();
    std::printf("%s:%d reserved %.1f MiB, peak reserved %.1f MiB, peak live %.1f MiB, live at end "
                "%.1f MiB, %zu segments, %zu streams\n",
                key.first.c_str(), key.second, s.reserved_bytes / kMiB,
                s.peak_reserved_bytes / kMiB, r.peak_live_bytes / kMiB, r.live_bytes / kMiB,
                s.segments, r.streams.size());
    for (auto& [ptr, held] : r.live) r.pool->Free(held.first);
  }
  return 0;
}
