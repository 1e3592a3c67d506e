// The x8 kernels' dispatch (which instruction-set build runs), the packing of
// GGUF rows into groups of 8 (layout: matmul_cpu_x8.h), the weights packed once
// at load, and the scalar kernel that defines the results bit for bit.

#include "ops/matmul/matmul_cpu_x8.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/check.h"
#include "core/cpu_features.h"
#include "core/logging.h"

namespace nanoserve::matmul_cpu::x8 {

namespace {

uint16_t ld16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j from the 12 scale bytes.
void scale_min_k4(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

std::atomic<int> g_forced{-1};

Path path_from_env() {
  static const Path p = [] {
    const Path best = [] {
      for (Path q : {Path::kAmx, Path::kAvx512Vnni, Path::kAvxVnni, Path::kAvx2}) {
        if (path_available(q)) return q;
      }
      return Path::kScalar;
    }();
    const char* env = std::getenv("NANOSERVE_CPU_MATMUL");
    if (env == nullptr || *env == '\0' || std::string(env) == "auto") return best;
    for (Path q : kPaths) {
      if (std::string(env) != path_name(q)) continue;
      const char* why = "";
      if (path_available(q, &why)) return q;
      NS_LOG(WARNING) << "NANOSERVE_CPU_MATMUL=" << env << " is not available here (" << why << "); using "
                      << path_name(best);
      return best;
    }
    NS_LOG(WARNING) << "NANOSERVE_CPU_MATMUL=" << env
                    << " is none of auto, scalar, avx2, avx-vnni, avx512-vnni, amx, amx-emulated; using " << path_name(best);
    return best;
  }();
  return p;
}

}  // namespace

Kind kind_of(DType dt) {
  switch (dt) {
    case DType::kQ4_0: return kQ4_0;
    case DType::kQ4_1: return kQ4_1;
    case DType::kQ8_0: return kQ8_0;
    case DType::kQ4_K: return kQ4K;
    case DType::kQ5_K: return kQ5K;
    case DType::kQ6_K: return kQ6K;
    default: return kNone;
  }
}

const char* path_name(Path p) {
  switch (p) {
    case Path::kScalar: return "scalar";
    case Path::kAvx2: return "avx2";
    case Path::kAvxVnni: return "avx-vnni";
    case Path::kAvx512Vnni: return "avx512-vnni";
    case Path::kAmx: return "amx";
    case Path::kAmxEmulated: return "amx-emulated";
  }
  return "?";
}

bool path_available(Path p, const char** why) {
  const CpuFeatures& f = cpu_features();
  const char* missing = nullptr;
  switch (p) {
    case Path::kScalar: break;
    case Path::kAvx2:
      if (group_fn_avx2() == nullptr)
        missing = "not compiled (no x86-64 AVX2 compiler support)";
      else if (!f.avx2)
        missing = "the CPU or OS lacks AVX2/FMA/F16C";
      break;
    case Path::kAvxVnni:
      if (group_fn_avx_vnni() == nullptr)
        missing = "not compiled (the compiler lacks -mavxvnni)";
      else if (!f.avx_vnni)
        missing = "the CPU lacks AVX-VNNI";
      break;
    case Path::kAvx512Vnni:
      if (group_fn_avx512_vnni() == nullptr)
        missing = "not compiled (the compiler lacks AVX-512 VNNI)";
      else if (!f.avx512_vnni)
        missing = "the CPU or OS lacks AVX-512 F/BW/VL/VNNI";
      break;
    case Path::kAmx:
      if (group_fn_amx() == nullptr)
        missing = "not compiled (the compiler lacks -mamx-tile -mamx-int8)";
      else if (!f.amx_int8 || !f.avx512_vnni)
        missing = "the CPU or OS lacks AMX-INT8 (or AVX-512 VNNI beside it)";
      else if (!amx_tiles_permitted())
        missing = "the kernel refused this process the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM)";
      break;
    case Path::kAmxEmulated:
      if (group_fn_amx_emulated() == nullptr)
        missing = "not compiled (the compiler lacks AVX-512 VNNI)";
      else if (!f.avx512_vnni)
        missing = "the CPU or OS lacks AVX-512 F/BW/VL/VNNI";
      break;
  }
  if (why != nullptr && missing != nullptr) *why = missing;
  return missing == nullptr;
}

Path active_path() {
  const int forced = g_forced.load(std::memory_order_relaxed);
  return forced >= 0 ? static_cast<Path>(forced) : path_from_env();
}

void force_path(Path p) {
  const char* why = "";
  NS_CHECK(path_available(p, &why)) << "matmul path " << path_name(p) << ": " << why;
  g_forced.store(static_cast<int>(p));
}

void clear_forced_path() {
  g_forced.store(-1);
}

GroupFn group_fn(Path p) {
  switch (p) {
    case Path::kAvx2: return group_fn_avx2();
    case Path::kAvxVnni: return group_fn_avx_vnni();
    case Path::kAvx512Vnni: return group_fn_avx512_vnni();
    case Path::kAmx: return group_fn_amx();
    case Path::kAmxEmulated: return group_fn_amx_emulated();
    default: return nullptr;
  }
}

int64_t group_bytes(Kind k, int64_t K) {
  return K / kUnitValues[k] * kUnitBytes[k];
}

void pack_group(Kind k, const uint8_t* base, int64_t row_bytes, int64_t o0, int nrows, int64_t K,
                uint8_t* out) {
  const int64_t nunits = K / kUnitValues[k], ub = kUnitBytes[k];
  std::memset(out, 0, static_cast<size_t>(nunits * ub));
  const int64_t src_ub = row_bytes / nunits;  // the stored block's bytes
  for (int r = 0; r < nrows; ++r) {
    const uint8_t* row = base + (o0 + r) * row_bytes;
    for (int64_t b = 0; b < nunits; ++b) {
      const uint8_t* s = row + b * src_ub;
      uint8_t* u = out + b * ub;
      auto lane4 = [&](uint8_t* vec, const uint8_t* src) { std::memcpy(vec + 4 * r, src, 4); };
      switch (k) {
        case kQ4_0:
        case kQ4_1: {
          std::memcpy(u + 2 * r, s, 2);
          if (k == kQ4_1) std::memcpy(u + 16 + 2 * r, s + 2, 2);
          const uint8_t* qs = s + (k == kQ4_1 ? 4 : 2);
          uint8_t* q = u + (k == kQ4_1 ? 32 : 16);
          for (int j = 0; j < 4; ++j) lane4(q + 32 * j, qs + 4 * j);
          break;
        }
        case kQ8_0: {
          std::memcpy(u + 2 * r, s, 2);
          for (int j = 0; j < 8; ++j) {
            for (int i = 0; i < 4; ++i)
              u[16 + 32 * j + 4 * r + i] = static_cast<uint8_t>(s[2 + 4 * j + i] ^ 0x80);
          }
          break;
        }
        case kQ4K:
        case kQ5K: {
          std::memcpy(u + 2 * r, s, 2);
          std::memcpy(u + 16 + 2 * r, s + 2, 2);
          for (int j = 0; j < 8; ++j) {
            int sc, mn;
            scale_min_k4(s + 4, j, &sc, &mn);
            u[32 + 8 * j + r] = static_cast<uint8_t>(sc);
            u[96 + 16 * (j / 2) + 2 * r + (j & 1)] = static_cast<uint8_t>(mn);
          }
          const uint8_t* qs = s + (k == kQ4K ? 16 : 48);
          for (int c = 0; c < 4; ++c) {
            for (int j = 0; j < 8; ++j) lane4(u + 160 + 32 * (8 * c + j), qs + 32 * c + 4 * j);
          }
          if (k == kQ5K) {
            for (int j = 0; j < 8; ++j) lane4(u + 1184 + 32 * j, s + 16 + 4 * j);
          }
          break;
        }
        case kQ6K: {
          std::memcpy(u + 2 * r, s + 208, 2);
          for (int i = 0; i < 16; ++i) u[16 + 8 * i + r] = s[192 + i];
          for (int h = 0; h < 2; ++h) {
            for (int j = 0; j < 8; ++j) {
              uint8_t* at = u + 144 + 768 * h + 96 * j;
              for (int kk = 0; kk < 2; ++kk) lane4(at + 32 * kk, s + 64 * h + 32 * kk + 4 * j);
              lane4(at + 64, s + 128 + 32 * h + 4 * j);
            }
          }
          break;
        }
        default: NS_CHECK(false) << "x8 pack of kind " << k;
      }
    }
  }
}

// ---- weights packed at load ---------------------------------------------------

namespace {

struct Entry {
  std::weak_ptr<void> owner;
  DType dtype;
  int64_t n, k;
  std::shared_ptr<const Packed> packed;
};

std::mutex g_mu;
std::unordered_map<const void*, Entry>& registry() {
  static auto* m = new std::unordered_map<const void*, Entry>();
  return *m;
}

bool same_owner(const std::weak_ptr<void>& a, const std::shared_ptr<void>& b) {
  return !a.expired() && !a.owner_before(b) && !b.owner_before(a);
}

}  // namespace

void prepare(const Tensor& w) {
  const Kind k = kind_of(w.dtype());
  if (k == kNone || w.ndim() != 2 || !w.owner() || w.dim(1) % kUnitValues[k] != 0) return;
  if (find_prepared(w)) return;
  const int64_t N = w.dim(0), K = w.dim(1), gb = group_bytes(k, K), ng = (N + kRows - 1) / kRows;
  auto p = std::make_shared<Packed>();
  p->group_bytes = gb;
  p->data = {static_cast<uint8_t*>(std::aligned_alloc(64, static_cast<size_t>((ng * gb + 63) / 64 * 64))),
             &std::free};
  NS_CHECK(p->data != nullptr) << "out of memory packing a " << w.shape_string() << " weight";
  const auto* base = static_cast<const uint8_t*>(w.data());
  const int64_t row_bytes = dtype_bytes(w.dtype(), K);
  for (int64_t g = 0; g < ng; ++g) {
    const int nrows = static_cast<int>(std::min<int64_t>(kRows, N - g * kRows));
    pack_group(k, base, row_bytes, g * kRows, nrows, K, p->data.get() + g * gb);
  }
  std::lock_guard<std::mutex> lock(g_mu);
  auto& reg = registry();
  for (auto it = reg.begin(); it != reg.end();)
    it = it->second.owner.expired() ? reg.erase(it) : std::next(it);
  reg[w.data()] = Entry{w.owner(), w.dtype(), N, K, std::move(p)};
}

std::shared_ptr<const Packed> find_prepared(const Tensor& w) {
  if (!w.owner()) return nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  auto& reg = registry();
  const auto it = reg.find(w.data());
  if (it == reg.end()) return nullptr;
  const Entry& e = it->second;
  if (e.dtype != w.dtype() || e.n != w.dim(0) || e.k != w.dim(1) || !same_owner(e.owner, w.owner()))
    return nullptr;
  return e.packed;
}

// ---- activations ----------------------------------------------------------------

void fill_sums(const Acts& a, int64_t t_begin, int64_t t_end, bool blocks, bool kquant, int32_t* sum32,
               int32_t* bs32, int32_t* q6init) {
  for (int64_t t = t_begin; t < t_end; ++t) {
    if (blocks) {
      for (int64_t b = 0; b < a.nb; ++b) {
        const quant::BlockQ8Act& x = a.xa[t * a.nb + b];
        int32_t s = 0;
        for (int j = 0; j < quant::kBlock; ++j) s += x.qs[j];
        sum32[t * a.nb + b] = s;
      }
    }
    if (kquant) {
      for (int64_t sb = 0; sb < a.nsb; ++sb) {
        const quant::BlockQ8KAct& x = a.xk[t * a.nsb + sb];
        for (int p = 0; p < 4; ++p) {
          const int lo = x.bsums[4 * p] + x.bsums[4 * p + 1], hi = x.bsums[4 * p + 2] + x.bsums[4 * p + 3];
          bs32[(t * a.nsb + sb) * 4 + p] = static_cast<int32_t>(
              (static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16) | static_cast<uint16_t>(lo));
        }
        for (int i = 0; i < 16; ++i) q6init[(t * a.nsb + sb) * 16 + i] = -32 * x.bsums[i];
      }
    }
  }
}

// ---- the scalar kernel --------------------------------------------------------------

namespace {

// One stored unit decoded: the quants as ints (Q8_0 signed, the others
// unsigned), the integer scale and min of each value's sub-block, the float
// scales.
struct Unit {
  int q[256];
  int sc[16], mn[8];
  float d, m;
};

void decode_unit(Kind k, const uint8_t* s, Unit& u) {
  switch (k) {
    case kQ4_0:
    case kQ4_1: {
      u.d = quant::f16_to_f32(ld16(s));
      u.m = k == kQ4_1 ? quant::f16_to_f32(ld16(s + 2)) : 0.0f;
      const uint8_t* qs = s + (k == kQ4_1 ? 4 : 2);
      for (int j = 0; j < 16; ++j) {
        u.q[j] = qs[j] & 0x0f;
        u.q[j + 16] = qs[j] >> 4;
      }
      break;
    }
    case kQ8_0:
      u.d = quant::f16_to_f32(ld16(s));
      for (int j = 0; j < 32; ++j) u.q[j] = static_cast<int8_t>(s[2 + j]);
      break;
    case kQ4K:
    case kQ5K: {
      u.d = quant::f16_to_f32(ld16(s));
      u.m = quant::f16_to_f32(ld16(s + 2));
      for (int j = 0; j < 8; ++j) scale_min_k4(s + 4, j, &u.sc[j], &u.mn[j]);
      const uint8_t* qs = s + (k == kQ4K ? 16 : 48);
      for (int c = 0; c < 4; ++c) {
        for (int l = 0; l < 32; ++l) {
          u.q[64 * c + l] = qs[32 * c + l] & 0x0f;
          u.q[64 * c + 32 + l] = qs[32 * c + l] >> 4;
        }
      }
      if (k == kQ5K) {
        for (int p = 0; p < 256; ++p) u.q[p] |= ((s[16 + p % 32] >> (p / 32)) & 1) << 4;
      }
      break;
    }
    default: {  // Q6_K
      for (int p = 0; p < 256; ++p) {
        const int h = p / 128, kk = (p % 128) / 32, l = p % 32;
        const uint8_t lo = s[64 * h + l + 32 * (kk & 1)];
        u.q[p] = (kk >= 2 ? lo >> 4 : lo & 0x0f) | (((s[128 + 32 * h + l] >> (2 * kk)) & 3) << 4);
      }
      for (int i = 0; i < 16; ++i) u.sc[i] = static_cast<int8_t>(s[192 + i]);
      u.d = quant::f16_to_f32(ld16(s + 208));
      break;
    }
  }
}

// acc after one unit of one token (the reduction order of matmul_cpu_x8.h).
float unit_step(Kind k, const Unit& u, const Acts& a, int64_t t, int64_t b, float acc) {
  if (k <= kQ8_0) {
    const quant::BlockQ8Act& x = a.xa[t * a.nb + b];
    int32_t i = 0;
    for (int j = 0; j < 32; ++j) i += u.q[j] * x.qs[j];
    if (k == kQ4_0) {
      int32_t sx = 0;
      for (int j = 0; j < 32; ++j) sx += x.qs[j];
      i -= 8 * sx;
    }
    acc = std::fma(u.d * x.d, static_cast<float>(i), acc);
    if (k == kQ4_1) acc = std::fma(u.m, x.s, acc);
    return acc;
  }
  const quant::BlockQ8KAct& x = a.xk[t * a.nsb + b];
  int32_t isum = 0;
  if (k == kQ6K) {
    for (int si = 0; si < 16; ++si) {
      int32_t i = -32 * x.bsums[si];
      for (int l = 0; l < 16; ++l) i += u.q[16 * si + l] * x.qs[16 * si + l];
      isum += u.sc[si] * i;
    }
    return std::fma(u.d * x.d, static_cast<float>(isum), acc);
  }
  int32_t msum = 0;
  for (int s = 0; s < 8; ++s) {
    int32_t i = 0;
    for (int l = 0; l < 32; ++l) i += u.q[32 * s + l] * x.qs[32 * s + l];
    isum += u.sc[s] * i;
    msum += u.mn[s] * (x.bsums[2 * s] + x.bsums[2 * s + 1]);
  }
  acc = std::fma(u.d * x.d, static_cast<float>(isum), acc);
  return std::fma(-(u.m * x.d), static_cast<float>(msum), acc);
}

}  // namespace

void scalar_rows(Kind k, const uint8_t* base, int64_t row_bytes, const Acts& a, int64_t T, float* y,
                 int64_t N, int64_t o_begin, int64_t o_end) {
  const int64_t nunits = k <= kQ8_0 ? a.nb : a.nsb, src_ub = row_bytes / nunits;
  constexpr int kTokens = 8;
  Unit u;
  for (int64_t o = o_begin; o < o_end; ++o) {
    const uint8_t* row = base + o * row_bytes;
    for (int64_t t0 = 0; t0 < T; t0 += kTokens) {
      const int n = static_cast<int>(std::min<int64_t>(kTokens, T - t0));
      float acc[kTokens] = {};
      for (int64_t b = 0; b < nunits; ++b) {
        decode_unit(k, row + b * src_ub, u);
        for (int c = 0; c < n; ++c) acc[c] = unit_step(k, u, a, t0 + c, b, acc[c]);
      }
      for (int c = 0; c < n; ++c) y[(t0 + c) * N + o] = acc[c];
    }
  }
}

}  // namespace nanoserve::matmul_cpu::x8
