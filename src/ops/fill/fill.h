#pragma once
// Deterministic pseudo-random fill values, for dummy weights: element i of a
// tensor filled with (seed, scale) is fill_uniform_value(seed, i, scale), a
// function of those three alone, so a fill is the same on any device, in any
// launch shape, and the host can recompute any element (the test's oracle).
// Inline and usable from device code (fill_cuda.cu compiles it with nvcc).

#include <cstdint>

#include "core/host_device.h"

namespace nanoserve {

// splitmix64's finaliser over (seed, index): a good 64-bit mix of both.
NS_HOST_DEVICE inline uint64_t fill_hash(uint64_t seed, uint64_t index) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + index + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-scale, scale): the top 24 bits as k / 2^23 - 1 (exact in f32),
// times scale (one f32 rounding, the same on host and device).
NS_HOST_DEVICE inline float fill_uniform_value(uint64_t seed, uint64_t index, float scale) {
  const int32_t k = static_cast<int32_t>(fill_hash(seed, index) >> 40) - (1 << 23);  // [-2^23, 2^23)
  return static_cast<float>(k) * (1.0f / static_cast<float>(1 << 23)) * scale;
}

}  // namespace nanoserve
