#pragma once
// Element types. Quantized types are GGUF block formats: `block_elems` values
// stored in `block_bytes` bytes. Rows of a quantized tensor are whole blocks.

#include <cstdint>
#include <optional>
#include <string_view>

namespace nanoserve {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,  // 32 values: f16 scale + 32 x int8
  kQ4_0,  // 32 values: f16 scale + 16 bytes of 4-bit
  kQ4_1,  // 32 values: f16 scale + f16 min + 16 bytes of 4-bit
  kQ4_K,  // 256 values: super-block with 6-bit sub-block scales/mins
  kQ6_K,  // 256 values: 6-bit quants, 8-bit sub-block scales
  kI32,
  kQ5_0,  // 32 values: f16 scale + 32 high bits + 16 bytes of low 4-bit
  kQ5_1,  // 32 values: f16 scale + f16 min + 32 high bits + 16 bytes of low 4-bit
  kQ2_K,  // 256 values: 2-bit quants, 4-bit sub-block scales/mins
  kQ3_K,  // 256 values: 3-bit quants, 6-bit signed sub-block scales
  kQ5_K,  // 256 values: 5-bit quants, 6-bit sub-block scales/mins (as Q4_K)
  kF8E4M3,  // FP8 E4M3 (core/half.h); a weight of it carries its scales beside it
  kU8,      // raw bytes (safetensors U8: an HF MXFP4 checkpoint's blocks and scales)
  kMXFP4,   // 32 values: E8M0 scale byte + 16 bytes of E2M1 (OCP microscaling FP4, ggml's layout)
};

struct DTypeInfo {
  const char* name;
  int32_t block_elems;  // 1 for plain types
  int32_t block_bytes;  // bytes per block (element size for plain types)
  bool quantized;
};

const DTypeInfo& dtype_info(DType t);
inline const char* dtype_name(DType t) { return dtype_info(t).name; }
std::optional<DType> dtype_from_name(std::string_view name);

// Bytes of `n` elements. PRECOND: n % block_elems == 0.
int64_t dtype_bytes(DType t, int64_t n);

}  // namespace nanoserve
