#include "model/rope_layout.h"

#include <cstring>

#include "core/check.h"
#include "model/arch.h"

namespace nanoserve {

namespace {

// rows [0, n_heads * hd) of src into dst, permuted head by head.
void permute_heads(const uint8_t* src, uint8_t* dst, int64_t n_heads, int64_t hd, size_t row_bytes) {
  const int64_t half = hd / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t to = h * hd + 2 * i + j, from = h * hd + j * half + i;
        std::memcpy(dst + to * row_bytes, src + from * row_bytes, row_bytes);
      }
    }
  }
}

size_t row_bytes_of(const Tensor& t) {
  return static_cast<size_t>(t.nbytes() / t.dim(0));
}

// The q and k rows of a fused [q; k; v] projection, permuted; v rows copied.
Tensor permute_fused_qkv(const Tensor& w, int64_t n_heads, int64_t n_kv_heads, int64_t hd) {
  const size_t rb = row_bytes_of(w);
  Tensor out = Tensor::empty(w.dtype(), w.shape());
  const auto* src = static_cast<const uint8_t*>(w.data());
  auto* dst = static_cast<uint8_t*>(out.data());
  const int64_t q_rows = n_heads * hd, k_rows = n_kv_heads * hd;
  permute_heads(src, dst, n_heads, hd, rb);
  permute_heads(src + q_rows * rb, dst + q_rows * rb, n_kv_heads, hd, rb);
  std::memcpy(dst + (q_rows + k_rows) * rb, src + (q_rows + k_rows) * rb,
              static_cast<size_t>(w.dim(0) - q_rows - k_rows) * rb);
  return out;
}

class HalfSplitGgufTensors final : public TensorSource {
 public:
  HalfSplitGgufTensors(std::shared_ptr<const GgufFile> file, ModelConfig config)
      : file_(std::make_shared<GgufTensorSource>(std::move(file))), config_(std::move(config)) {}
  std::string describe() const override { return file_->describe(); }
  bool contains(std::string_view name) const override { return file_->contains(name); }
  StatusOr<Tensor> tensor(std::string_view name) const override {
    NS_ASSIGN_OR_RETURN(Tensor t, file_->tensor(name));
    return rope_rows_to_pairs(config_, name, std::move(t), std::string(name));
  }

 private:
  std::shared_ptr<const GgufTensorSource> file_;
  ModelConfig config_;
};

}  // namespace

Tensor permute_rope_rows(const Tensor& w, int64_t n_heads, int64_t hd) {
  NS_CHECK(w.ndim() >= 1 && w.dim(0) == n_heads * hd && hd % 2 == 0 && w.is_contiguous())
      << "permute_rope_rows: " << w.shape_string();
  Tensor out = Tensor::empty(w.dtype(), w.shape());
  permute_heads(static_cast<const uint8_t*>(w.data()), static_cast<uint8_t*>(out.data()), n_heads, hd,
                row_bytes_of(w));
  return out;
}

StatusOr<Tensor> rope_rows_to_pairs(const ModelConfig& c, std::string_view name, Tensor t,
                                    const std::string& shown) {
  if (!name.starts_with("blk.")) return t;
  const size_t dot = name.find('.', 4);
  if (dot == std::string_view::npos) return t;
  const std::string_view rest = name.substr(dot + 1);  // "blk.N.attn_q.weight" -> "attn_q.weight"
  int64_t heads = 0;
  bool fused = false;
  if (rest == "attn_q.weight" || rest == "attn_q.bias") {
    heads = c.n_heads;
  } else if (rest == "attn_k.weight" || rest == "attn_k.bias") {
    heads = c.n_kv_heads;
  } else if (rest == "attn_q_norm.weight" || rest == "attn_k_norm.weight") {
    heads = 1;
  } else if (rest == "attn_qkv.weight") {
    fused = true;
  } else {
    return t;
  }
  const int64_t hd = c.head_dim;
  const int64_t rows = fused ? (c.n_heads + 2 * c.n_kv_heads) * hd : heads * hd;
  if (t.ndim() < 1 || t.dim(0) != rows || !t.is_contiguous() ||
      (dtype_info(t.dtype()).quantized && t.ndim() < 2)) {
    return invalid_argument("tensor '" + shown + "' has shape " + t.shape_string() + ", the config implies " +
                            std::to_string(rows) + " rows");
  }
  if (hd % 2 != 0 || c.rope_dim != hd) {
    return unimplemented("tensor '" + shown + "': rotary embeddings over " + std::to_string(c.rope_dim) +
                         " of " + std::to_string(hd) + " head dims (partial or odd) are not supported");
  }
  return fused ? permute_fused_qkv(t, c.n_heads, c.n_kv_heads, hd) : permute_rope_rows(t, heads, hd);
}

std::shared_ptr<const TensorSource> gguf_model_tensors(std::shared_ptr<const GgufFile> file,
                                                       const ModelConfig& config) {
  const ArchInfo* arch = find_arch(config.arch);
  if (arch != nullptr && arch->gguf_rope_pairs == RopePairs::kHalves) {
    return std::make_shared<HalfSplitGgufTensors>(std::move(file), config);
  }
  return std::make_shared<GgufTensorSource>(std::move(file));
}

}  // namespace nanoserve
