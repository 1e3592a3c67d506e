// The CPU matmul's entry points (matmul.h): activation rounding once per call,
// the work split over threads, and the choice of kernel per weight: the x8
// kernels (matmul_cpu_x8*.cc, weights packed at load) for Q4_0, Q4_1, Q8_0 and
// the K-quants Q4_K / Q5_K / Q6_K, the block and float kernels
// (matmul_cpu_blocks.cc, matmul_cpu_kquant.cc) for the rest.

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "core/check.h"
#include "ops/matmul/matmul.h"
#include "ops/matmul/matmul_cpu_internal.h"
#include "ops/matmul/matmul_cpu_x8.h"
#include "ops/matmul/quant_blocks.h"

namespace nanoserve {

using matmul_cpu::is_quantized;
using matmul_cpu::kMaxGenericK;
using matmul_cpu::kMaxQ4K;
using matmul_cpu::matmul_rows;
using quant::BlockQ8Act;
using quant::kBlock;
using quant::quantize_row_q8;

// [T][K/32] activation blocks for the 32-value types, then [T][K/256] for the
// K-quants, then the sums the x8 kernels read: [T][K/32] int32 per block,
// [T][K/256][4 + 16] int32 per super-block.
int64_t matmul_scratch_bytes(int64_t T, int64_t K) {
  const int64_t nb = (K + kBlock - 1) / kBlock, nsb = K / quant::kSuperBlock;
  return T * nb * static_cast<int64_t>(sizeof(BlockQ8Act)) +
         T * nsb * static_cast<int64_t>(sizeof(quant::BlockQ8KAct)) + T * nb * 4 + T * nsb * 20 * 4;
}

void matmul(std::span<const MatmulPair> pairs, const Tensor& x, ThreadPool& pool,
            std::span<std::byte> scratch) {
  NS_CHECK(x.ndim() == 2 && x.dtype() == DType::kF32 && x.is_contiguous()) << "x is [T, K] f32";
  const int64_t T = x.dim(0), K = x.dim(1);
  bool any_blocks = false, any_kquant = false;  // which activation roundings the pairs read
  int64_t total_rows = 0;
  for (const MatmulPair& p : pairs) {
    NS_CHECK(p.w->ndim() == 2 && p.w->dim(1) == K)
        << "w" << p.w->shape_string() << " vs x" << x.shape_string();
    NS_CHECK(p.y->ndim() == 2 && p.y->dim(0) == T && p.y->dim(1) == p.w->dim(0) &&
             p.y->dtype() == DType::kF32)
        << "y" << p.y->shape_string() << " for w" << p.w->shape_string() << " and x" << x.shape_string();
    const DType dt = p.w->dtype();
    const bool direct = is_quantized(dt) || dt == DType::kF32 || dt == DType::kF16 || dt == DType::kBF16;
    NS_CHECK(direct || (dt != DType::kI32 && K <= kMaxGenericK))
        << "matmul of " << dtype_name(dt) << " with K = " << K;
    any_kquant = any_kquant || matmul_cpu::kquant_direct(dt);
    any_blocks = any_blocks || (is_quantized(dt) && !matmul_cpu::kquant_direct(dt));
    total_rows += p.w->dim(0);
  }
  if (T == 0 || total_rows == 0) return;
  const float* xs = x.data_as<const float>();
  BlockQ8Act* xa = nullptr;
  matmul_cpu::KQuantActs acts{};
  namespace x8 = matmul_cpu::x8;
  x8::Acts xacts{};
  if (any_blocks || any_kquant) {
    NS_CHECK(K % kBlock == 0 && K <= kMaxQ4K)
        << "quantized matmul needs K % 32 == 0 and K <= " << kMaxQ4K << ", K = " << K;
    NS_CHECK(!any_kquant || K % quant::kSuperBlock == 0) << "K-quant matmul needs K % 256 == 0, K = " << K;
    NS_CHECK(static_cast<int64_t>(scratch.size()) >= matmul_scratch_bytes(T, K))
        << "matmul scratch " << scratch.size() << " < " << matmul_scratch_bytes(T, K);
    const int64_t nb = K / kBlock, nsb = K / quant::kSuperBlock;
    std::byte* at = scratch.data();
    xa = reinterpret_cast<BlockQ8Act*>(at);
    at += T * nb * static_cast<int64_t>(sizeof(BlockQ8Act));
    auto* xk = reinterpret_cast<quant::BlockQ8KAct*>(at);
    at += T * nsb * static_cast<int64_t>(sizeof(quant::BlockQ8KAct));
    auto* sum32 = reinterpret_cast<int32_t*>(at);
    auto* bs32 = sum32 + T * nb;
    auto* q6init = bs32 + T * nsb * 4;
    acts = {xk, nsb};
    xacts = {xa, sum32, nb, xk, bs32, q6init, nsb};
    auto quantize = [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) {
        if (any_blocks) quantize_row_q8(xs + t * K, K, xa + t * nb);
        if (any_kquant) quant::quantize_row_q8k(xs + t * K, K, xk + t * nsb);
      }
      x8::fill_sums(xacts, b, e, any_blocks, any_kquant, sum32, bs32, q6init);
    };
    if (T >= 16) {
      pool.parallel_for(T, std::ref(quantize));
    } else {
      quantize(0, T, 0);
    }
  }
  // Per pair: the x8 kernel's kind (kNone: the kernels above), its packed copy
  // if prepared, and the pair's share of the work items (groups of 8 rows for
  // the x8 SIMD kernels, rows otherwise).
  const x8::Path path = x8::active_path();
  const x8::GroupFn group_fn = x8::group_fn(path);
  struct Plan {
    x8::Kind kind;
    std::shared_ptr<const x8::Packed> packed;
    int64_t items;
  };
  // Reused across calls: a decode step allocates nothing (tests/engine/decode_alloc_test.cc).
  thread_local std::vector<Plan> plans;
  plans.clear();
  int64_t total_items = 0;
  for (const MatmulPair& p : pairs) {
    Plan pl{x8::kind_of(p.w->dtype()), nullptr, p.w->dim(0)};
    if (pl.kind != x8::kNone && group_fn != nullptr) {
      pl.packed = x8::find_prepared(*p.w);
      pl.items = (p.w->dim(0) + x8::kRows - 1) / x8::kRows;
    }
    total_items += pl.items;
    plans.push_back(std::move(pl));
  }
  const Plan* plan = plans.data();  // the workers' own thread_local `plans` is another vector
  auto rows = [&](int64_t begin, int64_t end, int) {
    int64_t first = 0;  // global item of pairs[i]'s item 0
    for (size_t i = 0; i < pairs.size(); ++i) {
      const MatmulPair& p = pairs[i];
      const Plan& pl = plan[i];
      const int64_t b = std::max(begin, first), e = std::min(end, first + pl.items);
      first += pl.items;
      if (b >= e) continue;
      const int64_t N = p.w->dim(0);
      float* y = p.y->data_as<float>();
      const auto* base = static_cast<const uint8_t*>(p.w->data());
      const int64_t row_bytes = dtype_bytes(p.w->dtype(), K);
      if (pl.kind == x8::kNone) {
        matmul_rows(*p.w, xs, xa, acts, T, y, b - (first - pl.items), e - (first - pl.items));
      } else if (group_fn == nullptr) {
        x8::scalar_rows(pl.kind, base, row_bytes, xacts, T, y, N, b - (first - pl.items),
                        e - (first - pl.items));
      } else {
        // Not prepared at load (a weight made on the fly): each group packed
        // here, into this thread's buffer, the same bytes prepare makes.
        thread_local std::vector<uint8_t> buf;
        const int64_t gb = x8::group_bytes(pl.kind, K);
        constexpr int kPer = x8::kMaxGroupsPerCall;
        if (!pl.packed && static_cast<int64_t>(buf.size()) < kPer * gb)
          buf.resize(static_cast<size_t>(kPer * gb));
        const int64_t g_end = e - (first - pl.items);
        for (int64_t g = b - (first - pl.items); g < g_end; g += kPer) {
          const int ng = static_cast<int>(std::min<int64_t>(kPer, g_end - g));
          const int nrows = static_cast<int>(std::min<int64_t>(ng * x8::kRows, N - g * x8::kRows));
          const uint8_t* gp;
          if (pl.packed) {
            gp = pl.packed->data.get() + g * pl.packed->group_bytes;
          } else {
            for (int i = 0; i < ng; ++i) {
              const int64_t o = (g + i) * x8::kRows;
              x8::pack_group(pl.kind, base, row_bytes, o,
                             static_cast<int>(std::min<int64_t>(x8::kRows, N - o)), K, buf.data() + i * gb);
            }
            gp = buf.data();
          }
          group_fn(pl.kind, gp, gb, ng, xacts, T, y, N, g * x8::kRows, nrows);
        }
      }
    }
  };
  pool.parallel_for(total_items, std::ref(rows));
  plans.clear();  // drops the references to the packed weights
}

void matmul_prepare(const Tensor& w) {
  matmul_cpu::x8::prepare(w);
}

void matmul(const Tensor& w, const Tensor& x, Tensor& y, ThreadPool& pool, std::span<std::byte> scratch) {
  const MatmulPair pair{&w, &y};
  matmul(std::span<const MatmulPair>(&pair, 1), x, pool, scratch);
}

}  // namespace nanoserve
