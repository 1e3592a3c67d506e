// cuBLASLt GEMMs. Row-major y[M, N] = x[M, K] w[N, K]^T is, column-major,
// y^T[N, M] = w^T x^T: A = w seen as a K x N column-major matrix (ld K),
// transposed; B = x seen as K x M (ld K), as is; D = y seen as N x M (ld N).
// This "TN" form is the one every cuBLASLt kernel family supports for bf16.
//
// The table: open addressing over kCacheCapacity entries, probing at most
// kProbe slots from the key's hash; a miss takes a free slot in that window or
// replaces its least recently used entry. Layouts live inside the entries
// (cublasLtMatrixLayoutInit into opaque storage), so neither a hit nor a miss
// allocates; only the heuristic call of a miss does host work.

#include "ops/matmul/matmul_cuda.cuh"

#include <cublasLt.h>

#include <array>
#include <type_traits>

#include "core/cuda/cuda_check.cuh"

#define NS_CUBLAS_CHECK(expr)                                            \
  do {                                                                   \
    const cublasStatus_t ns_cublas_st_ = (expr);                         \
    NS_CHECK(ns_cublas_st_ == CUBLAS_STATUS_SUCCESS)                     \
        << #expr << ": " << cublasLtGetStatusName(ns_cublas_st_) << " (" \
        << cublasLtGetStatusString(ns_cublas_st_) << ")";                \
  } while (0)

namespace nanoserve {

namespace {

constexpr int kProbe = 8;
constexpr int kHeuristicResults = 8;

struct Key {
  int64_t m = 0, n = 0, k = 0;
  DType y_dtype = DType::kF32;
  uint16_t align_x = 0, align_w = 0, align_y = 0;  // bytes, at most 256
  bool operator==(const Key&) const = default;
};

uint64_t hash_key(const Key& k) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint64_t v :
       {static_cast<uint64_t>(k.m), static_cast<uint64_t>(k.n), static_cast<uint64_t>(k.k),
        static_cast<uint64_t>(k.y_dtype), uint64_t{k.align_x}, uint64_t{k.align_w}, uint64_t{k.align_y}}) {
    h = (h ^ v) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  return h;
}

struct Entry {
  bool used = false;
  Key key;
  uint64_t last_use = 0;
  cublasLtMatrixLayoutOpaque_t a, b, d;  // w, x, y (column-major views, see the top)
  cublasLtMatmulAlgo_t algo;
  size_t workspace = 0;  // bytes the algorithm needs
};

// The largest power of two dividing the address, at most 256.
uint16_t alignment_of(const void* p) {
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  for (uint16_t a = 256; a > 1; a /= 2) {
    if (u % a == 0) return a;
  }
  return 1;
}

cudaDataType_t cuda_type(DType t) {
  return t == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
}

}  // namespace

struct GemmCuda::Impl {
  GemmPolicy policy;
  int64_t workspace_bytes;
  Tensor workspace;
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDescOpaque_t op;
  std::remove_pointer_t<cublasLtMatmulPreference_t> pref;  // the opaque struct the handle type points to
  std::array<Entry, kCacheCapacity> table;
  uint64_t clock = 0;
  int64_t misses = 0, fallbacks = 0;

  void init_layouts(Entry& e, const Key& k) {
    NS_CUBLAS_CHECK(cublasLtMatrixLayoutInit(&e.a, CUDA_R_16BF, static_cast<uint64_t>(k.k),
                                             static_cast<uint64_t>(k.n), k.k));
    NS_CUBLAS_CHECK(cublasLtMatrixLayoutInit(&e.b, CUDA_R_16BF, static_cast<uint64_t>(k.k),
                                             static_cast<uint64_t>(k.m), k.k));
    NS_CUBLAS_CHECK(cublasLtMatrixLayoutInit(&e.d, cuda_type(k.y_dtype), static_cast<uint64_t>(k.n),
                                             static_cast<uint64_t>(k.m), k.n));
  }

  static int32_t splitk_of(const cublasLtMatmulAlgo_t& algo) {
    int32_t splitk = 1;
    size_t written = 0;
    NS_CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                                         sizeof splitk, &written));
    return splitk;
  }

  // The heuristic's first usable choice for e's layouts. Under kBatchInvariant
  // the preference already excludes split-K reductions; a split-K choice is
  // skipped as well, in case a kernel splits without a reduction scheme.
  void choose(Entry& e) {
    const uint32_t ax = e.key.align_x, aw = e.key.align_w, ay = e.key.align_y;
    NS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                         &aw, sizeof aw));
    NS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                         &ax, sizeof ax));
    NS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                         &ay, sizeof ay));
    NS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                         &ay, sizeof ay));
    cublasLtMatmulHeuristicResult_t results[kHeuristicResults] = {};
    int returned = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, &op, &e.a, &e.b, &e.d, &e.d, &pref,
                                                             kHeuristicResults, results, &returned);
    // NOT_SUPPORTED: no kernel at all, reported below with the problem.
    NS_CHECK(st == CUBLAS_STATUS_SUCCESS || st == CUBLAS_STATUS_NOT_SUPPORTED)
        << "cublasLtMatmulAlgoGetHeuristic: " << cublasLtGetStatusName(st);
    if (st != CUBLAS_STATUS_SUCCESS) returned = 0;
    for (int i = 0; i < returned; ++i) {
      const cublasLtMatmulHeuristicResult_t& r = results[i];
      if (r.state != CUBLAS_STATUS_SUCCESS || r.workspaceSize > static_cast<size_t>(workspace_bytes))
        continue;
      if (policy == GemmPolicy::kBatchInvariant && splitk_of(r.algo) > 1) continue;
      e.algo = r.algo;
      e.workspace = r.workspaceSize;
      return;
    }
    NS_CHECK(false) << "cuBLASLt has no kernel for y[" << e.key.m << ", " << e.key.n << "] "
                    << dtype_name(e.key.y_dtype) << " = x[" << e.key.m << ", " << e.key.k << "] w[" << e.key.n
                    << ", " << e.key.k << "]^T (bf16; alignments x " << ax << ", w " << aw << ", y " << ay
                    << " bytes; " << returned << " candidates)";
  }

  // kBatchInvariant: the anchor problem's kernel, if it runs e's problem.
  bool take_anchor(Entry& e, const cublasLtMatmulAlgo_t& anchor) {
    cublasLtMatmulHeuristicResult_t r = {};
    const cublasStatus_t st = cublasLtMatmulAlgoCheck(handle, &op, &e.a, &e.b, &e.d, &e.d, &anchor, &r);
    if (st != CUBLAS_STATUS_SUCCESS || r.workspaceSize > static_cast<size_t>(workspace_bytes)) return false;
    e.algo = anchor;
    e.workspace = r.workspaceSize;
    return true;
  }

  // The entry holding key, or null.
  Entry* find(const Key& key, uint64_t h) {
    for (int p = 0; p < kProbe; ++p) {
      Entry& e = table[(h + static_cast<uint64_t>(p)) % kCacheCapacity];
      if (e.used && e.key == key) return &e;
    }
    return nullptr;
  }

  // Where a new key goes: the first free slot of its window, else the
  // window's least recently used entry.
  Entry& victim(uint64_t h) {
    Entry* v = nullptr;
    for (int p = 0; p < kProbe; ++p) {
      Entry& e = table[(h + static_cast<uint64_t>(p)) % kCacheCapacity];
      if (!e.used) return e;
      if (v == nullptr || e.last_use < v->last_use) v = &e;
    }
    return *v;
  }

  Entry& lookup(const Key& key) {
    const uint64_t h = hash_key(key);
    if (Entry* e = find(key, h)) {
      e->last_use = ++clock;
      return *e;
    }
    ++misses;
    // Under kBatchInvariant the anchor's kernel first; its own lookup may
    // replace entries, so this key's slot is chosen after it.
    cublasLtMatmulAlgo_t anchor_algo;
    const bool use_anchor = policy == GemmPolicy::kBatchInvariant && key.m != kInvariantAnchorM;
    if (use_anchor) {
      Key ak = key;
      ak.m = kInvariantAnchorM;
      anchor_algo = lookup(ak).algo;
    }
    Entry& e = victim(h);
    e.used = true;
    e.key = key;
    e.last_use = ++clock;
    init_layouts(e, key);
    if (!use_anchor) {
      choose(e);
    } else if (!take_anchor(e, anchor_algo)) {
      ++fallbacks;
      choose(e);
    }
    return e;
  }
};

GemmCuda::GemmCuda(int64_t workspace_bytes, GemmPolicy policy) : impl_(std::make_unique<Impl>()) {
  NS_CHECK(workspace_bytes >= 0) << "GemmCuda: workspace_bytes " << workspace_bytes;
  impl_->policy = policy;
  impl_->workspace_bytes = workspace_bytes;
  if (workspace_bytes > 0) impl_->workspace = cuda::empty(DType::kF32, {(workspace_bytes + 3) / 4});
  NS_CUBLAS_CHECK(cublasLtCreate(&impl_->handle));
  NS_CUBLAS_CHECK(cublasLtMatmulDescInit(&impl_->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  NS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(&impl_->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  NS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(&impl_->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  NS_CUBLAS_CHECK(cublasLtMatmulPreferenceInit(&impl_->pref));
  const uint64_t ws = static_cast<uint64_t>(workspace_bytes);
  NS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(&impl_->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &ws, sizeof ws));
  if (policy == GemmPolicy::kBatchInvariant) {
    const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
    NS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        &impl_->pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &none, sizeof none));
  }
}

GemmCuda::~GemmCuda() {
  if (impl_ && impl_->handle) cublasLtDestroy(impl_->handle);
}

GemmPolicy GemmCuda::policy() const {
  return impl_->policy;
}
int64_t GemmCuda::workspace_bytes() const {
  return impl_->workspace_bytes;
}
int64_t GemmCuda::cache_misses() const {
  return impl_->misses;
}
int64_t GemmCuda::invariance_fallbacks() const {
  return impl_->fallbacks;
}

void GemmCuda::matmul(const Tensor& x, const Tensor& w, const Tensor& y, cuda::Stream s) {
  NS_CHECK(x.device() == Device::kCUDA && w.device() == Device::kCUDA && y.device() == Device::kCUDA)
      << "GemmCuda::matmul: device tensors";
  NS_CHECK(x.dtype() == DType::kBF16 && x.ndim() == 2 && x.is_contiguous())
      << "GemmCuda::matmul: x must be a contiguous [M, K] bf16 tensor, got " << dtype_name(x.dtype())
      << x.shape_string();
  NS_CHECK(w.dtype() == DType::kBF16 && w.ndim() == 2 && w.is_contiguous() && w.dim(1) == x.dim(1))
      << "GemmCuda::matmul: w must be a contiguous [N, " << x.dim(1) << "] bf16 tensor, got "
      << dtype_name(w.dtype()) << w.shape_string();
  NS_CHECK((y.dtype() == DType::kBF16 || y.dtype() == DType::kF32) && y.ndim() == 2 && y.is_contiguous() &&
           y.dim(0) == x.dim(0) && y.dim(1) == w.dim(0))
      << "GemmCuda::matmul: y must be a contiguous [" << x.dim(0) << ", " << w.dim(0)
      << "] bf16 or f32 tensor, got " << dtype_name(y.dtype()) << y.shape_string();
  const int64_t M = x.dim(0), N = w.dim(0), K = x.dim(1);
  if (M == 0 || N == 0) return;
  NS_CHECK(K > 0) << "GemmCuda::matmul: K is 0";
  Key key;
  key.m = M;
  key.n = N;
  key.k = K;
  key.y_dtype = y.dtype();
  key.align_x = alignment_of(x.data());
  key.align_w = alignment_of(w.data());
  key.align_y = alignment_of(y.data());
  Entry& e = impl_->lookup(key);
  const float alpha = 1.0f, beta = 0.0f;
  NS_CUBLAS_CHECK(cublasLtMatmul(impl_->handle, &impl_->op, &alpha, w.data(), &e.a, x.data(), &e.b, &beta,
                                 y.data(), &e.d, y.data(), &e.d, &e.algo, impl_->workspace.data(),
                                 e.workspace, s));
}

GemmAlgoInfo GemmCuda::algo_info(int64_t M, int64_t N, int64_t K, DType y_dtype) {
  NS_CHECK(M > 0 && N > 0 && K > 0 && (y_dtype == DType::kBF16 || y_dtype == DType::kF32))
      << "GemmCuda::algo_info: problem " << M << " x " << N << " x " << K;
  Key key;
  key.m = M;
  key.n = N;
  key.k = K;
  key.y_dtype = y_dtype;
  key.align_x = key.align_w = key.align_y = 256;
  const Entry& e = impl_->lookup(key);
  GemmAlgoInfo info;
  size_t written = 0;
  auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attr, auto* v) {
    NS_CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&e.algo, attr, v, sizeof *v, &written));
  };
  get(CUBLASLT_ALGO_CONFIG_ID, &info.algo_id);
  get(CUBLASLT_ALGO_CONFIG_TILE_ID, &info.tile_id);
  get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &info.splitk);
  get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &info.reduction_scheme);
  get(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &info.swizzle);
  get(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &info.custom_option);
  get(CUBLASLT_ALGO_CONFIG_STAGES_ID, &info.stages_id);
  get(CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &info.inner_shape_id);
  get(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &info.cluster_shape_id);
  info.workspace_bytes = static_cast<int64_t>(e.workspace);
  return info;
}

}  // namespace nanoserve
