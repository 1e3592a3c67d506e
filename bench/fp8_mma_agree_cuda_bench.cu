// Does an FP8 (E4M3) tensor-core product give a column the same bits whatever
// the product's width? The question that decides how FP8 activations can keep
// batch invariance (docs/log/model_cuda.md, "A plan: FP8 activations"): the
// streaming kernel would multiply a few tokens (N = 8 .. 32) and the tiled
// kernel 64 or 128, so a row's bits must not depend on N.
//
// One warpgroup multiplies the same 64 x K codes A by the first N rows of the
// same 128 x K codes B with `wgmma.m64nNk32.f32.e4m3.e4m3` (both operands in
// shared memory, no swizzle), N = 8, 16, 32, 64 and 128, one chain of k32
// steps over K; four warps do the same 64 x 8 with `mma.sync.m16n8k32` e4m3
// (which sm_90a builds of conversions and f16 products); and n8 and n64 with
// A from registers (the form the kernels would use for the weights). Prints,
// per data set and K, how many of the elements each pair shares differ, and
// each product's worst error against the exact sum (in units of the sum of
// |products|: a layout mistake shows as errors near 1).
//
//   fp8_mma_agree_cuda_bench

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/cuda/cuda_check.cuh"
#include "core/cuda/ptx.cuh"
#include "ops/matmul/wgmma_e4m3.cuh"

namespace {

using nanoserve::linear_detail::wgmma_e4m3;

constexpr int kRows = 64;   // A rows: one warpgroup's m64
constexpr int kCols = 128;  // B rows: the widest product
constexpr int kStep = 32;   // k bytes (E4M3 codes) a product

// The same with A from registers (RS), each thread's four words in the
// m16n8k32 fragment layout of its warp's 16 rows: the form the kernels would
// use for the weights.
template <int N>
__device__ __forceinline__ void wgmma_e4m3_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b,
                                              int scale_d);

template <>
__device__ __forceinline__ void wgmma_e4m3_rs<8>(float (&d)[4], const uint32_t (&a)[4], uint64_t b,
                                                 int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, "
      "1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d));
}

template <>
__device__ __forceinline__ void wgmma_e4m3_rs<64>(float (&d)[32], const uint32_t (&a)[4], uint64_t b,
                                                  int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
      "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, "
      "%31}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d));
}

// A shared-memory operand without swizzle, K-major: core matrices of 8 rows x
// 16 bytes, core (i, j) (row group i, k half j) at (2 i + j) x 128 bytes, so
// the two k halves are 128 bytes apart (leading offset) and row groups 256
// (stride offset).
__device__ __forceinline__ uint64_t descriptor(const void* smem) {
  const uint64_t addr = nanoserve::cuda::smem_addr(smem);
  return ((addr & 0x3FFFF) >> 4) | (uint64_t{128 >> 4} << 16) | (uint64_t{256 >> 4} << 32);
}

__device__ __forceinline__ int core_offset(int row, int kb) {
  return ((row / 8) * 2 + kb / 16) * 128 + (row % 8) * 16 + kb % 16;
}

// d[64, N] = a[64, K] . b[N, K]^T (codes row-major, K contiguous). One warpgroup;
// A from shared memory, or with kRegs from registers.
template <int N, bool kRegs>
__global__ void wgmma_kernel(const uint8_t* a, const uint8_t* b, float* d, int K) {
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  __shared__ alignas(128) uint8_t sa[kRows * kStep];
  __shared__ alignas(128) uint8_t sb[N * kStep];
  float acc[N / 2];
  for (float& v : acc) v = 0.0f;
  for (int k0 = 0; k0 < K; k0 += kStep) {
    for (int i = threadIdx.x; i < kRows * kStep; i += blockDim.x)
      sa[core_offset(i / kStep, i % kStep)] = a[(i / kStep) * K + k0 + i % kStep];
    for (int i = threadIdx.x; i < N * kStep; i += blockDim.x)
      sb[core_offset(i / kStep, i % kStep)] = b[(i / kStep) * K + k0 + i % kStep];
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    if constexpr (kRegs) {
      // Lane (g, t): rows g and g + 8 of its warp's 16, k 4t .. 4t + 3 and 16 + 4t .. 16 + 4t + 3.
      const uint8_t* r0 = a + (16 * warp + g) * K + k0;
      const uint8_t* r1 = r0 + 8 * K;
      uint32_t ra[4];
      std::memcpy(&ra[0], r0 + 4 * t, 4);
      std::memcpy(&ra[1], r1 + 4 * t, 4);
      std::memcpy(&ra[2], r0 + 16 + 4 * t, 4);
      std::memcpy(&ra[3], r1 + 16 + 4 * t, 4);
      wgmma_e4m3_rs<N>(acc, ra, descriptor(sb), k0 > 0);
    } else {
      wgmma_e4m3<N>(acc, descriptor(sa), descriptor(sb), k0 > 0);
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    __syncthreads();
  }
  // The accumulator fragment: warp w holds rows 16 w .. 16 w + 15; lane (g, t)
  // of n8 block j holds (g, 8 j + 2 t + {0, 1}) and (g + 8, ...).
  for (int j = 0; j < N / 8; ++j) {
    for (int h = 0; h < 2; ++h) {
      const int row = 16 * warp + g + 8 * h, col = 8 * j + 2 * t;
      d[row * N + col] = acc[4 * j + 2 * h];
      d[row * N + col + 1] = acc[4 * j + 2 * h + 1];
    }
  }
}

// The same 64 x 8 by mma.sync.m16n8k32 e4m3: warp w rows 16 w .. 16 w + 15.
__global__ void mma_sync_kernel(const uint8_t* a, const uint8_t* b, float* d, int K) {
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const uint8_t* r0 = a + (16 * warp + g) * K;
  const uint8_t* r1 = a + (16 * warp + g + 8) * K;
  const uint8_t* bn = b + g * K;
  for (int k0 = 0; k0 < K; k0 += kStep) {
    uint32_t a0, a1, a2, a3, b0, b1;
    std::memcpy(&a0, r0 + k0 + 4 * t, 4);
    std::memcpy(&a1, r1 + k0 + 4 * t, 4);
    std::memcpy(&a2, r0 + k0 + 16 + 4 * t, 4);
    std::memcpy(&a3, r1 + k0 + 16 + 4 * t, 4);
    std::memcpy(&b0, bn + k0 + 4 * t, 4);
    std::memcpy(&b1, bn + k0 + 16 + 4 * t, 4);
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  const int row = 16 * warp + g;
  d[row * 8 + 2 * t] = c[0];
  d[row * 8 + 2 * t + 1] = c[1];
  d[(row + 8) * 8 + 2 * t] = c[2];
  d[(row + 8) * 8 + 2 * t + 1] = c[3];
}

double e4m3_value(uint8_t code) {
  const int sign = code >> 7, exp = (code >> 3) & 15, man = code & 7;
  const double v = exp == 0 ? std::ldexp(man / 8.0, -6) : std::ldexp(1.0 + man / 8.0, exp - 7);
  return sign ? -v : v;
}

uint32_t next(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return static_cast<uint32_t>(s >> 11);
}

// Codes of a data set: "normal" keeps exponents within 2^-3 .. 2^3 (as scaled
// activations and weights are), "spread" takes every finite code.
std::vector<uint8_t> codes(size_t n, bool spread, uint64_t seed) {
  std::vector<uint8_t> out(n);
  for (uint8_t& c : out) {
    uint32_t r = next(seed);
    uint8_t code = static_cast<uint8_t>(r & 0xFF);
    if (!spread) code = static_cast<uint8_t>((r & 0x80) | ((4 + (r >> 8) % 7) << 3) | ((r >> 12) & 7));
    if ((code & 0x7F) == 0x7F) code &= 0xFE;  // no NaN
    c = code;
  }
  return out;
}

template <int N, bool kRegs = false>
std::vector<float> run_wgmma(const uint8_t* a, const uint8_t* b, int K) {
  float* d = nullptr;
  NS_CUDA_CHECK(cudaMalloc(&d, kRows * N * sizeof(float)));
  wgmma_kernel<N, kRegs><<<1, 128>>>(a, b, d, K);
  NS_CUDA_CHECK_LAUNCH();
  std::vector<float> out(kRows * N);
  NS_CUDA_CHECK(cudaMemcpy(out.data(), d, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  NS_CUDA_CHECK(cudaFree(d));
  return out;
}

}  // namespace

int main() {
  std::printf("%-7s %5s %-22s %9s %12s\n", "data", "K", "compared", "differ", "worst error");
  for (const bool spread : {false, true}) {
    for (const int K : {32, 256, 4096}) {
      const std::vector<uint8_t> ha = codes(static_cast<size_t>(kRows) * K, spread, 1 + K);
      const std::vector<uint8_t> hb = codes(static_cast<size_t>(kCols) * K, spread, 7 + K);
      uint8_t *a = nullptr, *b = nullptr;
      NS_CUDA_CHECK(cudaMalloc(&a, ha.size()));
      NS_CUDA_CHECK(cudaMalloc(&b, hb.size()));
      NS_CUDA_CHECK(cudaMemcpy(a, ha.data(), ha.size(), cudaMemcpyHostToDevice));
      NS_CUDA_CHECK(cudaMemcpy(b, hb.data(), hb.size(), cudaMemcpyHostToDevice));
      std::vector<std::vector<float>> by_n;
      by_n.push_back(run_wgmma<8>(a, b, K));
      by_n.push_back(run_wgmma<16>(a, b, K));
      by_n.push_back(run_wgmma<32>(a, b, K));
      by_n.push_back(run_wgmma<64>(a, b, K));
      by_n.push_back(run_wgmma<128>(a, b, K));
      const std::vector<float> rs8 = run_wgmma<8, true>(a, b, K), rs64 = run_wgmma<64, true>(a, b, K);
      float* d = nullptr;
      NS_CUDA_CHECK(cudaMalloc(&d, kRows * 8 * sizeof(float)));
      mma_sync_kernel<<<1, 128>>>(a, b, d, K);
      NS_CUDA_CHECK_LAUNCH();
      std::vector<float> sync(kRows * 8);
      NS_CUDA_CHECK(cudaMemcpy(sync.data(), d, sync.size() * sizeof(float), cudaMemcpyDeviceToHost));
      NS_CUDA_CHECK(cudaFree(d));
      NS_CUDA_CHECK(cudaFree(a));
      NS_CUDA_CHECK(cudaFree(b));
      // Exact sums in double, and sum |a b| for the error's unit.
      auto error = [&](const std::vector<float>& got, int n, int cols) {
        double worst = 0.0;
        for (int r = 0; r < kRows; ++r) {
          for (int c = 0; c < cols; ++c) {
            double exact = 0.0, mag = 0.0;
            for (int k = 0; k < K; ++k) {
              const double p = e4m3_value(ha[r * K + k]) * e4m3_value(hb[c * K + k]);
              exact += p;
              mag += std::fabs(p);
            }
            if (mag > 0.0) worst = std::fmax(worst, std::fabs(got[r * n + c] - exact) / mag);
          }
        }
        return worst;
      };
      auto differ = [&](const std::vector<float>& x, int nx, const std::vector<float>& y, int ny, int cols) {
        int count = 0;
        for (int r = 0; r < kRows; ++r) {
          for (int c = 0; c < cols; ++c) count += std::memcmp(&x[r * nx + c], &y[r * ny + c], 4) != 0;
        }
        return count;
      };
      const char* name = spread ? "spread" : "normal";
      const int widths[] = {8, 16, 32, 64, 128};
      for (int i = 0; i + 1 < 5; ++i) {
        char what[64];
        std::snprintf(what, sizeof what, "n%d vs n%d (%d cols)", widths[i], widths[i + 1], widths[i]);
        std::printf("%-7s %5d %-22s %4d/%-4d %12.3e\n", name, K, what,
                    differ(by_n[i], widths[i], by_n[i + 1], widths[i + 1], widths[i]), kRows * widths[i],
                    error(by_n[i + 1], widths[i + 1], widths[i + 1]));
      }
      std::printf("%-7s %5d %-22s %4d/%-4d %12.3e\n", name, K, "n8 vs mma.sync",
                  differ(by_n[0], 8, sync, 8, 8), kRows * 8, error(sync, 8, 8));
      std::printf("%-7s %5d %-22s %4d/%-4d %12.3e\n", name, K, "n8 A in registers vs n8",
                  differ(rs8, 8, by_n[0], 8, 8), kRows * 8, error(rs8, 8, 8));
      std::printf("%-7s %5d %-22s %4d/%-4d %12.3e\n", name, K, "n64 A in registers vs n64",
                  differ(rs64, 64, by_n[3], 64, 64), kRows * 64, error(rs64, 64, 64));
      std::printf("%-7s %5d %-22s %9s %12.3e\n", name, K, "n8 alone", "", error(by_n[0], 8, 8));
    }
  }
  return 0;
}
