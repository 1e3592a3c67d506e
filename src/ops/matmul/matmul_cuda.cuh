#pragma once
// CUDA GEMMs for the linear layers and the lm_head, through cuBLASLt. Plain C++
// declarations (no CUDA header); the definitions are in matmul_cuda.cu.
// matmul_ref (CPU, over f32 copies of the bf16 inputs) is the truth they are
// tested against.
//
//   y[M, N] = x[M, K] . w[N, K]^T   (row-major; w in the GGUF / HF [out, in] layout)
//   x, w: bf16; y: bf16 or f32; f32 accumulation; all device, contiguous.
//
// Algorithms. cuBLASLt's heuristic picks a kernel (tile, split-K, stages,
// cluster) per problem. The choice, with the matrix layouts, is kept per
// (M, N, K, y dtype, pointer alignments) in a fixed-capacity table, so a step
// that repeats shapes (steady decode) only looks it up: no allocation, no
// heuristic call. The workspace is allocated once, in the constructor.
//
// Batch invariance. Under GemmPolicy::kPerShape (the default) the heuristic
// runs for each M, and its choice, so the summation order of a row, can change
// with M: a row's bits may then depend on the batch. GemmPolicy::kBatchInvariant
// asks for kernels without split-K, picks one per (N, K, y dtype) at a fixed
// M (kInvariantAnchorM) and runs that same kernel for every M: a row is then
// computed the same way in any batch, provided the kernel itself does not
// reorder by M (cuBLASLt documents none of its kernels doing so once the
// configuration is fixed). tests/ops/matmul/matmul_cuda_test.cc checks it; the
// benchmark prints what each policy costs.

#include <cstdint>
#include <memory>

#include "core/cuda/device_memory.cuh"
#include "core/tensor.h"

namespace nanoserve {

enum class GemmPolicy {
  kPerShape,        // the heuristic's first choice for every (M, N, K, dtype)
  kBatchInvariant,  // one split-K-free kernel per (N, K, dtype), the same for every M
};

// The configuration cuBLASLt chose for one problem (for reports and tests).
struct GemmAlgoInfo {
  int32_t algo_id = -1;
  uint32_t tile_id = 0, stages_id = 0, reduction_scheme = 0, swizzle = 0, custom_option = 0;
  int32_t splitk = 0;
  uint16_t inner_shape_id = 0, cluster_shape_id = 0;
  int64_t workspace_bytes = 0;
  bool operator==(const GemmAlgoInfo&) const = default;
};

class GemmCuda {
 public:
  static constexpr int64_t kInvariantAnchorM = 64;
  static constexpr int kCacheCapacity = 256;  // entries; a full table replaces its least recently used

  explicit GemmCuda(int64_t workspace_bytes = 32 << 20, GemmPolicy policy = GemmPolicy::kPerShape);
  ~GemmCuda();
  GemmCuda(const GemmCuda&) = delete;
  GemmCuda& operator=(const GemmCuda&) = delete;

  // y = x . w^T on `s`. x: [M, K] bf16; w: [N, K] bf16; y: [M, N] bf16 or f32.
  // M == 0 does nothing. Shapes and dtypes are NS_CHECKed; a problem cuBLASLt
  // has no kernel for aborts with its status.
  void matmul(const Tensor& x, const Tensor& w, const Tensor& y, cuda::Stream s);

  // The configuration matmul() uses for this problem (looked up or chosen now,
  // for 256-byte-aligned operands).
  GemmAlgoInfo algo_info(int64_t M, int64_t N, int64_t K, DType y_dtype);

  GemmPolicy policy() const;
  int64_t workspace_bytes() const;
  // How many problems were not in the table (each cost a heuristic call); a
  // repeated step adds none.
  int64_t cache_misses() const;
  // kBatchInvariant: problems whose M the anchor kernel cannot run, which got a
  // kernel of their own (their rows may then differ from other batches'). 0 is
  // the expected value; a test checks it.
  int64_t invariance_fallbacks() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nanoserve
