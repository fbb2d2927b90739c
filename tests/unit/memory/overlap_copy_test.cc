// OverlapSafePieces: how a copy between overlapping ranges of one GPU is split so that CUDA,
// which leaves such a copy undefined, still moves the bytes as memmove would. The plan is
// applied here with memcpy on host memory, checking each piece as cudaMemcpy would need it.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "memory/cuda_devices.h"

namespace vramd::memory {
namespace {

// Applies the pieces for `size` bytes from buffer offset `src` to `dst` and compares the result
// with memmove's; fails where a piece overlaps itself.
void ExpectSameAsMemmove(size_t dst, size_t src, size_t size, size_t max_pieces) {
  std::vector<uint8_t> expected(512);
  std::iota(expected.begin(), expected.end(), 0);
  std::vector<uint8_t> got = expected;
  std::memmove(expected.data() + dst, expected.data() + src, size);

  const auto base = reinterpret_cast<uintptr_t>(got.data());
  const auto pieces = OverlapSafePieces(base + dst, base + src, size, max_pieces);
  ASSERT_TRUE(pieces.has_value()) << "dst " << dst << " src " << src << " size " << size;
  size_t covered = 0;
  for (const CopyPiece& p : *pieces) {
    const size_t from = src + p.offset;
    const size_t to = dst + p.offset;
    ASSERT_TRUE(to + p.size <= from || from + p.size <= to)
        << "piece at " << p.offset << " of " << p.size << " overlaps itself";
    std::memcpy(got.data() + to, got.data() + from, p.size);
    covered += p.size;
  }
  EXPECT_EQ(covered, dst == src ? 0 : size);
  EXPECT_EQ(got, expected) << "dst " << dst << " src " << src << " size " << size;
}

TEST(OverlapSafePiecesTest, EveryPlacementCopiesAsMemmoveDoes) {
  for (size_t size : {1, 7, 64, 100}) {
    for (size_t src = 100; src < 140; ++src) {
      for (size_t dst = 100 - (size < 100 ? size : 99); dst < 140 + size && dst + size <= 512;
           ++dst) {
        ExpectSameAsMemmove(dst, src, size, /*max_pieces=*/1000);
      }
    }
  }
}

TEST(OverlapSafePiecesTest, DisjointRangesAreOnePieceAndTheSameRangeNone) {
  const auto apart = OverlapSafePieces(0x10000, 0x20000, 4096, 16);
  ASSERT_TRUE(apart.has_value());
  ASSERT_EQ(apart->size(), 1u);
  EXPECT_EQ((*apart)[0].offset, 0u);
  EXPECT_EQ((*apart)[0].size, 4096u);
  // Adjacent ranges touch without overlapping.
  EXPECT_EQ(OverlapSafePieces(0x10000, 0x11000, 4096, 16)->size(), 1u);
  EXPECT_TRUE(OverlapSafePieces(0x10000, 0x10000, 4096, 16)->empty());
  EXPECT_TRUE(OverlapSafePieces(0x10000, 0x20000, 0, 16)->empty());
}

TEST(OverlapSafePiecesTest, RangesTooCloseForThePieceLimitAreLeftToStaging) {
  // 4 MiB moved by 4 bytes would take a million pieces.
  EXPECT_FALSE(OverlapSafePieces(0x10004, 0x10000, 4 << 20, 16).has_value());
  EXPECT_FALSE(OverlapSafePieces(0x10000, 0x10004, 4 << 20, 16).has_value());
  // A quarter apart: four pieces, within the limit, the last one first when moving up.
  const auto up = OverlapSafePieces(0x10000 + 1024, 0x10000, 4096, 16);
  ASSERT_TRUE(up.has_value());
  ASSERT_EQ(up->size(), 4u);
  EXPECT_EQ(up->front().offset, 3072u);
  EXPECT_EQ(up->back().offset, 0u);
  const auto down = OverlapSafePieces(0x10000, 0x10000 + 1024, 4096, 16);
  ASSERT_TRUE(down.has_value());
  EXPECT_EQ(down->front().offset, 0u);
  EXPECT_EQ(OverlapSafePieces(0x10000, 0x10000 + 1024, 4096, 3), std::nullopt);
}

}  // namespace
}  // namespace vramd::memory
