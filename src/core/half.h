// IEEE 754 binary16 ("half", FP16) and bfloat16 (BF16) conversions, held as their raw 16 bits.
//
// Narrowing rounds to nearest, ties to even, in one step from the double (no double rounding
// through float): a finite value too large for the format becomes infinity, one too small
// becomes a (signed) subnormal or zero. NaN stays a quiet NaN with the sign kept. Widening to
// float is exact. Header-only and constexpr; safe from any thread.
#pragma once

#include <bit>
#include <cstdint>

namespace vramd {
namespace half_internal {

// Rounds `value` to a binary format with kExpBits exponent bits and kMantBits stored
// mantissa bits (IEEE layout: sign, biased exponent, mantissa).
template <int kExpBits, int kMantBits>
constexpr uint16_t RoundFromDouble(double value) {
  constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  constexpr int kMaxExp = (1 << kExpBits) - 1;  // all ones: infinity or NaN
  constexpr uint64_t kMantMask = (uint64_t{1} << kMantBits) - 1;
  constexpr uint16_t kInf = static_cast<uint16_t>(kMaxExp << kMantBits);

  const uint64_t bits = std::bit_cast<uint64_t>(value);
  const auto sign = static_cast<uint16_t>((bits >> 63) << (kExpBits + kMantBits));
  const int exp = static_cast<int>((bits >> 52) & 0x7ff);
  const uint64_t mant = bits & ((uint64_t{1} << 52) - 1);

  if (exp == 0x7ff) {
    if (mant == 0) return sign | kInf;
    // Quiet NaN, keeping the payload's top bits.
    return static_cast<uint16_t>(sign | kInf | (uint64_t{1} << (kMantBits - 1)) |
                                 (mant >> (52 - kMantBits)));
  }
  // Zero, or a double subnormal: far below half a target subnormal either way.
  if (exp == 0) return sign;

  const int target_exp = exp - 1023 + kBias;
  if (target_exp >= kMaxExp) return sign | kInf;

  const uint64_t sig = mant | (uint64_t{1} << 52);  // 53 significant bits
  int shift;
  uint64_t rounded;
  if (target_exp >= 1) {  // normal in the target
    shift = 52 - kMantBits;
    rounded = (static_cast<uint64_t>(target_exp) << kMantBits) | ((sig >> shift) & kMantMask);
  } else {  // subnormal in the target: count in units of the smallest subnormal
    shift = 52 - kMantBits + 1 - target_exp;
    if (shift > 53) return sign;  // below half the smallest subnormal
    rounded = sig >> shift;
  }
  const uint64_t rest = sig & ((uint64_t{1} << shift) - 1);
  const uint64_t halfway = uint64_t{1} << (shift - 1);
  // A carry out of the mantissa moves into the exponent: the next binade, the smallest
  // normal (from subnormal) or infinity (from the largest finite), all correct.
  if (rest > halfway || (rest == halfway && (rounded & 1))) ++rounded;
  return static_cast<uint16_t>(sign | rounded);
}

}  // namespace half_internal

// binary16: 1 sign, 5 exponent, 10 mantissa bits. Largest finite 65504 (0x7BFF),
// smallest subnormal 2^-24 (0x0001).
constexpr uint16_t HalfFromDouble(double value) {
  return half_internal::RoundFromDouble<5, 10>(value);
}
constexpr uint16_t HalfFromFloat(float value) { return HalfFromDouble(value); }

constexpr float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    const float magnitude = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

// bfloat16: the top 16 bits of a float (1 sign, 8 exponent, 7 mantissa bits).
constexpr uint16_t Bf16FromDouble(double value) {
  return half_internal::RoundFromDouble<8, 7>(value);
}
constexpr uint16_t Bf16FromFloat(float value) { return Bf16FromDouble(value); }

constexpr float Bf16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// True for the infinities of each format (either sign).
constexpr bool HalfIsInf(uint16_t h) { return (h & 0x7fff) == 0x7c00; }
constexpr bool Bf16IsInf(uint16_t b) { return (b & 0x7fff) == 0x7f80; }

}  // namespace vramd
