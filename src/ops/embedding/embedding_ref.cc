#include "core/check.h"
#include "ops/embedding/embedding.h"
#include "ops/dequantize/dequantize.h"
#include "ops/matmul/quant_blocks.h"

namespace nanoserve {

void embedding_ref(const Tensor& table, std::span<const int32_t> tokens, Tensor& out) {
  const int64_t V = table.dim(0), D = table.dim(1), T = static_cast<int64_t>(tokens.size());
  NS_CHECK(out.dim(0) == T && out.dim(1) == D) << "embedding shapes";
  const auto* base = static_cast<const uint8_t*>(table.data());
  for (int64_t t = 0; t < T; ++t) {
    NS_CHECK(tokens[t] >= 0 && tokens[t] < V) << "token " << tokens[t] << " outside vocab " << V;
    dequantize_row(table.dtype(), base + tokens[t] * dtype_bytes(table.dtype(), D), out.data_as<float>() + t * D,
                      D);
  }
}

}  // namespace nanoserve
