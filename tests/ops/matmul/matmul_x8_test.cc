// The interleaved-row CPU kernels (src/ops/matmul/matmul_cpu_x8*.cc) on every
// path the machine has, forced one at a time: each against the scalar kernel
// (bit for bit: they do the same operations in the same order) and against
// the double-precision reference on the same rounded activations (within
// f32 rounding), batch- and thread-invariant, packed at load or per call.
// A path the CPU or compiler lacks is reported as skipped with its reason.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "ops/matmul/matmul.h"
#include "ops/matmul/matmul_cpu_x8.h"
#include "ops/matmul/quant_blocks.h"
#include "ops/random_weights.h"

namespace nanoserve {
namespace {

namespace x8 = matmul_cpu::x8;
using testing::f32_tensor;
using testing::f32_to_f16;
using testing::nan_tensor;
using testing::random_floats;

constexpr DType kTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0,
                            DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

// Byte offsets of the f16 scale fields of one stored block.
std::vector<int> f16_fields(DType dt) {
  switch (dt) {
    case DType::kQ4_0:
    case DType::kQ8_0: return {0};
    case DType::kQ4_1:
    case DType::kQ4_K:
    case DType::kQ5_K: return {0, 2};
    case DType::kQ6_K: return {208};
    default: return {};
  }
}

// Random stored blocks: every quant and sub-block scale bit pattern, finite
// f16 scales of either sign.
Tensor random_blocks(DType dt, int64_t N, int64_t K, uint32_t seed) {
  Tensor w = Tensor::empty(dt, {N, K});
  std::mt19937 rng(seed);
  auto* p = static_cast<uint8_t*>(w.data());
  for (int64_t i = 0; i < w.nbytes(); ++i) p[i] = static_cast<uint8_t>(rng());
  std::normal_distribution<float> dist(0.0f, dtype_info(dt).block_elems == 32 ? 0.05f : 0.004f);
  const int64_t bb = dtype_info(dt).block_bytes;
  for (int64_t b = 0; b < w.nbytes() / bb; ++b) {
    for (int off : f16_fields(dt)) {
      const uint16_t h = f32_to_f16(dist(rng));
      std::memcpy(p + b * bb + off, &h, 2);
    }
  }
  return w;
}

ThreadPool& pool_of(int threads) {
  static ThreadPool p1(1), p2(2), p3(3);
  return threads == 1 ? p1 : threads == 2 ? p2 : p3;
}

// Runs with path p forced for the whole call.
Tensor run(x8::Path p, const Tensor& w, const Tensor& x, int threads) {
  std::vector<std::byte> scratch(static_cast<size_t>(matmul_scratch_bytes(x.dim(0), x.dim(1))));
  Tensor y = nan_tensor({x.dim(0), w.dim(0)});
  x8::force_path(p);
  matmul(w, x, y, pool_of(threads), scratch);
  x8::clear_forced_path();
  return y;
}

// x as the kernels see it: rounded per 32 values (Q4_0, Q4_1, Q8_0) or per
// 256 (K-quants) to d * q.
std::vector<float> act_quantized(const std::vector<float>& x, int64_t T, int64_t K, DType dt) {
  std::vector<float> out(x.size());
  const int64_t n = dtype_info(dt).block_elems;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t b = 0; b < K / n; ++b) {
      const float* src = x.data() + t * K + b * n;
      float* dst = out.data() + t * K + b * n;
      if (n == 32) {
        quant::BlockQ8Act a;
        quant::quantize_row_q8_scalar(src, 32, &a);
        for (int j = 0; j < 32; ++j) dst[j] = a.d * static_cast<float>(a.qs[j]);
      } else {
        quant::BlockQ8KAct a;
        quant::quantize_row_q8k_scalar(src, 256, &a);
        for (int j = 0; j < 256; ++j) dst[j] = a.d * static_cast<float>(a.qs[j]);
      }
    }
  }
  return out;
}

// Outputs of got outside `want` +- the f32 rounding of the kernels' sums:
// one accumulator per output, two roundings per unit (the int32 to float of
// a K-quant super-block's sum can round too), each at most 2^-24 of
// sum |w| |x|. A wrong scale, min, nibble or bit moves outputs by far more.
int64_t count_outside(const Tensor& got, const Tensor& want, const Tensor& w, const std::vector<float>& xq,
                      int64_t T, std::string* first) {
  const int64_t N = w.dim(0), K = w.dim(1), units = K / dtype_info(w.dtype()).block_elems;
  std::vector<float> row(static_cast<size_t>(K));
  int64_t bad = 0;
  for (int64_t o = 0; o < N; ++o) {
    quant::row_to_f32(w.dtype(), static_cast<const uint8_t*>(w.data()) + o * dtype_bytes(w.dtype(), K),
                      row.data(), K);
    for (int64_t t = 0; t < T; ++t) {
      double mag = 0;
      for (int64_t k = 0; k < K; ++k) mag += std::fabs(static_cast<double>(row[k]) * xq[t * K + k]);
      const double tol = static_cast<double>(2 * units + 4) * 6e-8 * mag + 1e-6;
      const double g = got.data_as<float>()[t * N + o], r = want.data_as<float>()[t * N + o];
      if (!(std::fabs(g - r) <= tol)) {
        if (bad++ == 0 && first != nullptr)
          *first = "y[" + std::to_string(t) + "][" + std::to_string(o) + "] = " + std::to_string(g) +
                   ", want " + std::to_string(r) + " +- " + std::to_string(tol);
      }
    }
  }
  return bad;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), static_cast<size_t>(a.nbytes())) == 0;
}

class MatmulX8Path : public ::testing::TestWithParam<x8::Path> {
 protected:
  void SetUp() override {
    const char* why = "";
    if (!x8::path_available(GetParam(), &why)) GTEST_SKIP() << x8::path_name(GetParam()) << ": " << why;
  }
};

// Each dtype, shapes with a partial last group (N % 8 != 0) and token counts
// around the register tiles (4 or 8 tokens; AMX: 16, then a tail): the reference within f32
// rounding, the scalar kernel bit for bit, the weight packed at load or per
// call bit for bit.
TEST_P(MatmulX8Path, MatchesReferenceAndScalar) {
  const x8::Path p = GetParam();
  for (DType dt : kTypes) {
    const bool k_quant = dtype_info(dt).block_elems == 256;
    for (int64_t K : k_quant ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{96, 576}) {
      for (int64_t N : {1, 13, 40}) {
        for (int64_t T : {1, 3, 9, 17, 35}) {
          const std::string what = std::string(x8::path_name(p)) + " " + dtype_name(dt) +
                                   " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                                   " T=" + std::to_string(T);
          const Tensor w = random_blocks(dt, N, K, static_cast<uint32_t>(N * K + T));
          const auto xv = random_floats(T * K, 7 + static_cast<uint32_t>(T * K));
          const Tensor x = f32_tensor(xv, {T, K});
          const auto xq = act_quantized(xv, T, K, dt);
          Tensor ref = nan_tensor({T, N});
          matmul_ref(w, f32_tensor(xq, {T, K}), ref);
          const Tensor got = run(p, w, x, 2);
          std::string first;
          EXPECT_EQ(count_outside(got, ref, w, xq, T, &first), 0) << what << ": " << first;
          EXPECT_TRUE(same_bits(got, run(x8::Path::kScalar, w, x, 1))) << what << ": differs from scalar";
          matmul_prepare(w);
          ASSERT_TRUE(x8::find_prepared(w) != nullptr) << what;
          EXPECT_TRUE(same_bits(got, run(p, w, x, 3))) << what << ": packed at load differs";
        }
      }
    }
  }
}

// A token's outputs are the same bits alone (T = 1) as in any batch, at any
// position in it, and for any thread count.
TEST_P(MatmulX8Path, TokenResultIndependentOfBatchAndThreads) {
  const x8::Path p = GetParam();
  for (DType dt : kTypes) {
    const int64_t K = 512, N = 45, T = 21;
    const Tensor w = random_blocks(dt, N, K, 91);
    const auto xv = random_floats(T * K, 92);
    const Tensor yt = run(p, w, f32_tensor(xv, {T, K}), 2);
    for (int threads : {1, 3}) {
      EXPECT_TRUE(same_bits(yt, run(p, w, f32_tensor(xv, {T, K}), threads)))
          << x8::path_name(p) << " " << dtype_name(dt) << " with " << threads << " threads";
    }
    for (int64_t t = 0; t < T; ++t) {
      const std::vector<float> one(xv.begin() + t * K, xv.begin() + (t + 1) * K);
      const Tensor y1 = run(p, w, f32_tensor(one, {1, K}), 1 + static_cast<int>(t % 3));
      EXPECT_EQ(std::memcmp(y1.data(), yt.data_as<float>() + t * N, static_cast<size_t>(N) * 4), 0)
          << x8::path_name(p) << " " << dtype_name(dt) << " token " << t;
    }
    const int64_t first = 3, n = 13;  // shifts the token tiles
    const std::vector<float> window(xv.begin() + first * K, xv.begin() + (first + n) * K);
    const Tensor yw = run(p, w, f32_tensor(window, {n, K}), 2);
    EXPECT_EQ(std::memcmp(yw.data(), yt.data_as<float>() + first * N, static_cast<size_t>(n * N) * 4), 0)
        << x8::path_name(p) << " " << dtype_name(dt) << " tokens " << first << ".." << first + n;
  }
}

// The checks above catch a planted error: one f16 scale of a stored block
// off by one ulp, or the two nibbles of one quant byte swapped. Each must
// move an output off the scalar kernel's bits, and the swap also out of the
// reference's tolerance.
TEST_P(MatmulX8Path, PlantedErrorsAreCaught) {
  const x8::Path p = GetParam();
  for (DType dt : kTypes) {
    const int64_t K = 512, N = 11, T = 17, bb = dtype_info(dt).block_bytes;  // T: one AMX tile and a tail
    const Tensor w = random_blocks(dt, N, K, 101);
    const auto xv = random_floats(T * K, 102);
    const Tensor x = f32_tensor(xv, {T, K});
    const Tensor clean = run(x8::Path::kScalar, w, x, 1);
    const auto xq = act_quantized(xv, T, K, dt);
    Tensor ref = nan_tensor({T, N});
    matmul_ref(w, f32_tensor(xq, {T, K}), ref);

    Tensor bad_scale = random_blocks(dt, N, K, 101);
    auto* s = static_cast<uint8_t*>(bad_scale.data()) + 9 * dtype_bytes(dt, K) + bb;  // row 9, block 1
    uint16_t h;
    std::memcpy(&h, s + f16_fields(dt)[0], 2);
    ++h;
    std::memcpy(s + f16_fields(dt)[0], &h, 2);
    EXPECT_FALSE(same_bits(run(p, bad_scale, x, 2), clean)) << x8::path_name(p) << " " << dtype_name(dt);

    Tensor bad_nibble = random_blocks(dt, N, K, 101);
    // A quant byte of row 2, block 0, made to differ from its own swap.
    auto* q =
        static_cast<uint8_t*>(bad_nibble.data()) + 2 * dtype_bytes(dt, K) + (dt == DType::kQ6_K ? 5 : bb - 3);
    if ((*q >> 4) == (*q & 0x0f)) *q ^= 0x0f;
    *q = static_cast<uint8_t>((*q << 4) | (*q >> 4));
    // The reference reads the original weight: the swap must show.
    std::string first;
    EXPECT_GT(count_outside(run(p, bad_nibble, x, 2), ref, w, xq, T, &first), 0)
        << x8::path_name(p) << " " << dtype_name(dt);
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, MatmulX8Path, ::testing::ValuesIn(x8::kPaths),
                         [](const ::testing::TestParamInfo<x8::Path>& i) {
                           std::string n = x8::path_name(i.param);
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

// What the dispatcher sees, printed for the test log; the paths it reports
// available are the ones the CPU's flags allow.
TEST(MatmulX8, AvailabilityFollowsCpuFeatures) {
  const CpuFeatures& f = cpu_features();
  std::printf("cpu: avx2 %d avx-vnni %d avx512 %d avx512-vnni %d amx-int8 %d; active path %s\n", f.avx2,
              f.avx_vnni, f.avx512, f.avx512_vnni, f.amx_int8, x8::path_name(x8::active_path()));
  EXPECT_TRUE(x8::path_available(x8::Path::kScalar));
  EXPECT_TRUE(f.avx2 || !x8::path_available(x8::Path::kAvx2));
  EXPECT_TRUE(f.avx_vnni || !x8::path_available(x8::Path::kAvxVnni));
  EXPECT_TRUE(f.avx512_vnni || !x8::path_available(x8::Path::kAvx512Vnni));
  EXPECT_TRUE(f.amx_int8 || !x8::path_available(x8::Path::kAmx));
  // The emulation is never chosen on its own; AMX is, where the kernel permits it.
  EXPECT_NE(x8::active_path(), x8::Path::kAmxEmulated);
  if (x8::path_available(x8::Path::kAmx) && std::getenv("NANOSERVE_CPU_MATMUL") == nullptr) {
    EXPECT_EQ(x8::active_path(), x8::Path::kAmx);
  }
  for (x8::Path p : x8::kPaths) {
    const char* why = "";
    const bool ok = x8::path_available(p, &why);
    std::printf("  %-12s %s\n", x8::path_name(p), ok ? "available" : why);
  }
}

}  // namespace
}  // namespace nanoserve
