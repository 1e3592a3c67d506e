#include "model/hf_gptoss.h"

#include <cmath>
#include <cstring>

#include "core/half.h"
#include "ops/dequantize/dequantize.h"

namespace nanoserve {

namespace {

constexpr std::string_view kExperts = "mlp.experts.";

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

StatusOr<Tensor> read(const SafetensorsCheckpoint& ckpt, const std::string& name, std::vector<int64_t> shape,
                      bool bytes) {
  NS_ASSIGN_OR_RETURN(Tensor t, ckpt.tensor(name));
  if (t.shape() != shape) {
    return invalid_argument(ckpt.folder() + ": tensor '" + name + "' has shape " + t.shape_string() +
                            ", the config implies " + shape_str(shape));
  }
  const bool is_float = t.dtype() == DType::kF32 || t.dtype() == DType::kF16 || t.dtype() == DType::kBF16;
  if (bytes ? t.dtype() != DType::kU8 : !is_float) {
    return invalid_argument(ckpt.folder() + ": tensor '" + name + "' is " + dtype_name(t.dtype()) +
                            (bytes ? ", expected U8" : ", expected F32, F16 or BF16"));
  }
  return t;
}

// out[e][r][c] = w[e][c][cols_of(r)] for w [E, K, N]: the rows of a stored x @ W
// weight, `stride` apart from `first` (2 and 0/1 for the interleaved gate_up).
Tensor transpose_rows(const Tensor& w, int64_t first, int64_t stride) {
  const int64_t E = w.dim(0), K = w.dim(1), N = w.dim(2), R = N / stride;
  Tensor out = Tensor::empty(w.dtype(), {E, R, K});
  const int64_t es = dtype_bytes(w.dtype(), 1);
  const auto* src = static_cast<const char*>(w.data());
  auto* dst = static_cast<char*>(out.data());
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t k = 0; k < K; ++k)
        std::memcpy(dst + ((e * R + r) * K + k) * es, src + ((e * K + k) * N + first + r * stride) * es,
                    static_cast<size_t>(es));
  return out;
}

// Every stride-th column of b [E, N] from `first`, in f32: [E, N / stride].
Tensor bias_columns(const Tensor& b, int64_t first, int64_t stride) {
  const int64_t E = b.dim(0), N = b.dim(1), C = N / stride;
  std::vector<float> row(static_cast<size_t>(N));
  Tensor out = Tensor::empty(DType::kF32, {E, C});
  for (int64_t e = 0; e < E; ++e) {
    dequantize_row(b.dtype(), static_cast<const char*>(b.data()) + dtype_bytes(b.dtype(), e * N), row.data(),
                   N);
    for (int64_t c = 0; c < C; ++c)
      out.data_as<float>()[e * C + c] = row[static_cast<size_t>(first + c * stride)];
  }
  return out;
}

}  // namespace

void dequantize_hf_mxfp4(const uint8_t* blocks, const uint8_t* scales, int64_t rows, int64_t groups,
                         uint16_t* out) {
  static constexpr float kE2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                      -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  for (int64_t i = 0; i < rows * groups; ++i) {
    const float s = std::ldexp(1.0f, static_cast<int>(scales[i]) - 127);  // torch.ldexp, as transformers
    const uint8_t* b = blocks + i * 16;
    uint16_t* o = out + i * 32;
    for (int j = 0; j < 16; ++j) {
      o[2 * j] = f32_to_bf16(kE2M1[b[j] & 0x0F] * s);
      o[2 * j + 1] = f32_to_bf16(kE2M1[b[j] >> 4] * s);
    }
  }
}

bool gptoss_expert_tensor_name(std::string_view rest) {
  for (std::string_view n : {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight",
                             "ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias"}) {
    if (rest == n) return true;
  }
  return false;
}

std::vector<std::string> gptoss_expert_sources(const SafetensorsCheckpoint& ckpt, const std::string& p) {
  const std::string e = p + std::string(kExperts);
  std::vector<std::string> out = {e + "gate_up_proj_bias", e + "down_proj_bias"};
  for (const char* proj : {"gate_up_proj", "down_proj"}) {
    if (ckpt.find_tensor(e + proj + "_blocks") != nullptr) {
      out.push_back(e + proj + "_blocks");
      out.push_back(e + proj + "_scales");
    } else {
      out.push_back(e + proj);
    }
  }
  return out;
}

StatusOr<Tensor> gptoss_expert_tensor(const SafetensorsCheckpoint& ckpt, const ModelConfig& c,
                                      const std::string& p, std::string_view rest) {
  const int64_t E = c.n_experts, D = c.dim, F = c.expert_ffn_dim;
  const std::string e = p + std::string(kExperts);
  const bool gate = rest.starts_with("ffn_gate_"), up = rest.starts_with("ffn_up_");
  const int64_t first = up ? 1 : 0;
  if (rest.ends_with(".bias")) {
    if (gate || up) {
      NS_ASSIGN_OR_RETURN(Tensor b, read(ckpt, e + "gate_up_proj_bias", {E, 2 * F}, false));
      return bias_columns(b, first, 2);
    }
    NS_ASSIGN_OR_RETURN(Tensor b, read(ckpt, e + "down_proj_bias", {E, D}, false));
    return bias_columns(b, 0, 1);
  }
  const std::string proj = gate || up ? "gate_up_proj" : "down_proj";
  const int64_t in = gate || up ? D : F, out_rows = gate || up ? 2 * F : D;
  if (ckpt.find_tensor(e + proj + "_blocks") == nullptr) {  // float: x @ W, [E, in, out]
    NS_ASSIGN_OR_RETURN(Tensor w, read(ckpt, e + proj, {E, in, out_rows}, false));
    return gate || up ? transpose_rows(w, first, 2) : transpose_rows(w, 0, 1);
  }
  if (in % 32 != 0) {
    return invalid_argument(ckpt.folder() + ": tensor '" + e + proj + "_blocks': MXFP4 rows of " +
                            std::to_string(in) + " values are not whole blocks of 32");
  }
  const int64_t G = in / 32;
  NS_ASSIGN_OR_RETURN(Tensor blocks, read(ckpt, e + proj + "_blocks", {E, out_rows, G, 16}, true));
  NS_ASSIGN_OR_RETURN(Tensor scales, read(ckpt, e + proj + "_scales", {E, out_rows, G}, true));
  // Every out row dequantized, then the gate's or the up's rows kept.
  const int64_t stride = gate || up ? 2 : 1, R = out_rows / stride;
  Tensor out = Tensor::empty(DType::kBF16, {E, R, in});
  const auto* bl = static_cast<const uint8_t*>(blocks.data());
  const auto* sc = static_cast<const uint8_t*>(scales.data());
  for (int64_t x = 0; x < E; ++x) {
    for (int64_t r = 0; r < R; ++r) {
      const int64_t row = x * out_rows + first + r * stride;
      dequantize_hf_mxfp4(bl + row * G * 16, sc + row * G, 1, G,
                          static_cast<uint16_t*>(out.data()) + (x * R + r) * in);
    }
  }
  return out;
}

}  // namespace nanoserve
