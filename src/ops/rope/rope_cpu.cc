#include <cmath>
#include <functional>

#include "core/check.h"
#include "ops/rope/rope.h"

namespace nanoserve {

namespace {
// Bounds the per-token cos/sin table on the stack.
constexpr int64_t kMaxHalf = 256;
}  // namespace

void rope(Tensor& x, std::span<const int32_t> positions, std::span<const float> inv_freq, ThreadPool& pool) {
  const int64_t T = x.dim(0), H = x.dim(1), D = x.dim(2);
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  NS_CHECK(static_cast<int64_t>(positions.size()) == T && 2 * half <= D && half <= kMaxHalf) << "rope shapes";
  float* xs = x.data_as<float>();
  const float* inv = inv_freq.data();
  const int32_t* pos = positions.data();
  auto tokens = [&](int64_t b, int64_t e, int) {
    float cs[kMaxHalf], sn[kMaxHalf];
    for (int64_t t = b; t < e; ++t) {
      // One cos/sin per frequency, shared by every head of the token.
      for (int64_t i = 0; i < half; ++i) {
        const float angle = static_cast<float>(pos[t]) * inv[i];
        cs[i] = std::cos(angle);
        sn[i] = std::sin(angle);
      }
      for (int64_t h = 0; h < H; ++h) {
        float* v = xs + (t * H + h) * D;
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[2 * i], c = v[2 * i + 1];
          v[2 * i] = a * cs[i] - c * sn[i];
          v[2 * i + 1] = a * sn[i] + c * cs[i];
        }
      }
    }
  };
  if (T >= 16) {
    pool.parallel_for(T, std::ref(tokens));
  } else {
    tokens(0, T, 0);
  }
}

}  // namespace nanoserve
