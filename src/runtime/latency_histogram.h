// LatencyHistogram: request durations in log-spaced buckets, counted lock-free as requests are
// answered, so that a quantile over any span of time is the difference of two readings
// (rollback_rules.h reads a version's p99 over its window this way).
//
// Buckets: 8 per power of two of microseconds, from 1 us up to 2^36 us (19 hours); a quantile
// read from them is the bucket's upper bound, at most 12.5% above the true value.
//
// Thread safety: Add and Read from any thread.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>

namespace vramd::runtime {

class LatencyHistogram {
 public:
  static constexpr int kSubBuckets = 8;
  static constexpr int kOctaves = 36;
  static constexpr int kBuckets = kSubBuckets * kOctaves;
  using Counts = std::array<uint64_t, kBuckets>;

  static int BucketOf(uint64_t ns) {
    const uint64_t us = ns / 1000;
    if (us == 0) return 0;
    const int octave = std::bit_width(us) - 1;
    if (octave >= kOctaves) return kBuckets - 1;
    const uint64_t sub = octave >= 3 ? (us >> (octave - 3)) & 7 : (us << (3 - octave)) & 7;
    return octave * kSubBuckets + static_cast<int>(sub);
  }
  // Every duration in `bucket` is below this.
  static double UpperBoundUs(int bucket) {
    const int octave = bucket / kSubBuckets;
    const int sub = bucket % kSubBuckets;
    return static_cast<double>(uint64_t{1} << octave) * (1.0 + (sub + 1) / 8.0);
  }
  // The upper bound of the bucket that holds the `share` quantile of `counts`; 0 when empty.
  static double QuantileUs(const Counts& counts, double share) {
    uint64_t total = 0;
    for (uint64_t c : counts) total += c;
    if (total == 0) return 0;
    // The nearest rank: the smallest count that covers `share` of the total.
    const auto rank = static_cast<uint64_t>(std::ceil(static_cast<double>(total) * share));
    uint64_t seen = 0;
    for (int b = 0; b < kBuckets; ++b) {
      seen += counts[b];
      if (seen > 0 && seen >= rank) return UpperBoundUs(b);
    }
    return UpperBoundUs(kBuckets - 1);
  }

  void Add(uint64_t ns) { counts_[BucketOf(ns)].fetch_add(1, std::memory_order_relaxed); }
  Counts Read() const {
    Counts out{};
    for (int b = 0; b < kBuckets; ++b) out[b] = counts_[b].load(std::memory_order_relaxed);
    return out;
  }

 private:
  std::array<std::atomic<uint64_t>, kBuckets> counts_{};
};

}  // namespace vramd::runtime
