#include "model/hf_fp8.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/half.h"
#include "ops/dequantize/dequantize.h"

namespace nanoserve {

namespace {

using nlohmann::json;

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string shown(const json& v) {
  return v.dump().substr(0, 48);
}

// Messages name the file and the key: "config.json: 'quantization_config.format': ...".
class QuantReader {
 public:
  explicit QuantReader(const std::string& name) : name_(name) {}
  Status bad(const std::string& key, const std::string& what) const {
    return invalid_argument(name_ + ": 'quantization_config." + key + "': " + what);
  }
  Status refuse(const std::string& key, const std::string& what) const {
    return unimplemented(name_ + ": 'quantization_config." + key + "': " + what);
  }

 private:
  const std::string& name_;
};

bool null_or_absent(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null();
}

bool is_empty_value(const json& v) {
  return v.is_null() || ((v.is_object() || v.is_array()) && v.empty());
}

// A block shape [rows, cols] of positive integers at `key`.
Status read_block(const QuantReader& r, const json& v, const std::string& key, int64_t* rows, int64_t* cols) {
  if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer() ||
      v[0].get<int64_t>() < 1 || v[1].get<int64_t>() < 1 || v[0].get<int64_t>() > (1 << 20) ||
      v[1].get<int64_t>() > (1 << 20)) {
    return r.bad(key, "expected [rows, cols], two positive integers, found " + shown(v));
  }
  *rows = v[0].get<int64_t>();
  *cols = v[1].get<int64_t>();
  return Status::ok_status();
}

// compressed-tensors' format, at the top or in a group: the two that store FP8 weights as they are.
Status check_format(const QuantReader& r, const json& obj, const std::string& key) {
  auto it = obj.find("format");
  if (it == obj.end() || it->is_null()) return Status::ok_status();
  if (!it->is_string()) return r.bad(key, "expected a string");
  const std::string f = it->get<std::string>();
  if (f != "float-quantized" && f != "naive-quantized") {
    return r.refuse(key, "'" + f.substr(0, 48) +
                             "' is not supported (FP8 weights as float-quantized or naive-quantized are)");
  }
  return Status::ok_status();
}

Status read_group(const QuantReader& r, const std::string& g, const json& group, HfFp8* q) {
  const std::string p = "config_groups." + g + ".";
  if (!group.is_object()) return r.bad("config_groups." + g, "expected an object");
  NS_RETURN_IF_ERROR(check_format(r, group, p + "format"));
  auto wit = group.find("weights");
  if (wit == group.end() || !wit->is_object()) return r.bad(p + "weights", "missing or not an object");
  const json& w = *wit;
  auto num_bits = w.find("num_bits");
  if (num_bits == w.end() || !num_bits->is_number_integer()) return r.bad(p + "weights.num_bits", "missing");
  if (num_bits->get<int64_t>() != 8) {
    return r.refuse(p + "weights.num_bits", std::to_string(num_bits->get<int64_t>()) +
                                                "-bit weights are not supported (8-bit FP8 are)");
  }
  auto type = w.find("type");
  if (type == w.end() || !type->is_string()) return r.bad(p + "weights.type", "missing or not a string");
  if (type->get<std::string>() != "float") {
    return r.refuse(p + "weights.type", "'" + type->get<std::string>().substr(0, 16) +
                                            "': int8 weights are not supported (FP8, 'float', are)");
  }
  if (auto s = w.find("symmetric"); s != w.end() && !s->is_null() && !(s->is_boolean() && s->get<bool>())) {
    return r.refuse(p + "weights.symmetric", "asymmetric weights (a zero point) are not supported");
  }
  if (auto d = w.find("dynamic"); d != w.end() && !d->is_null() && !(d->is_boolean() && !d->get<bool>())) {
    return r.refuse(p + "weights.dynamic", shown(*d) + ": weights quantized at run time are not supported");
  }
  auto strategy = w.find("strategy");
  if (strategy == w.end() || !strategy->is_string())
    return r.bad(p + "weights.strategy", "missing or not a string");
  const std::string st = strategy->get<std::string>();
  if (st == "channel") {
    q->channel = true;
  } else if (st == "tensor") {
    q->tensor = true;
  } else if (st == "block") {
    auto bs = w.find("block_structure");
    if (bs == w.end() || bs->is_null())
      return r.bad(p + "weights.block_structure", "missing with strategy block");
    int64_t rows = 0, cols = 0;
    NS_RETURN_IF_ERROR(read_block(r, *bs, p + "weights.block_structure", &rows, &cols));
    if (q->block_rows > 0 && (q->block_rows != rows || q->block_cols != cols)) {
      return r.refuse(p + "weights.block_structure", "groups with different blocks are not supported");
    }
    q->block_rows = rows;
    q->block_cols = cols;
  } else {
    return r.refuse(p + "weights.strategy",
                    "'" + st.substr(0, 24) + "' is not supported (channel, tensor and block are)");
  }
  if (auto a = group.find("input_activations"); a != group.end() && !a->is_null()) {
    if (!a->is_object()) return r.bad(p + "input_activations", "expected an object or null");
    auto d = a->find("dynamic");
    if (d == a->end() || !d->is_boolean() || !d->get<bool>()) {
      return r.refuse(p + "input_activations.dynamic",
                      "static activation scales are not supported (dynamic activations are: the GPU "
                      "quantizes them a token, the CPU runs them in f32)");
    }
  }
  if (!null_or_absent(group, "output_activations")) {
    return r.refuse(p + "output_activations", "quantized outputs are not supported");
  }
  return Status::ok_status();
}

Status read_compressed_tensors(const QuantReader& r, const json& qc, HfFp8* q) {
  q->method = HfFp8::Method::kCompressedTensors;
  NS_RETURN_IF_ERROR(check_format(r, qc, "format"));
  for (const char* key : {"sparsity_config", "transform_config", "kv_cache_scheme"}) {
    auto it = qc.find(key);
    if (it != qc.end() && !is_empty_value(*it)) {
      const std::string what = std::string(key) == "kv_cache_scheme"   ? "a quantized KV cache"
                               : std::string(key) == "sparsity_config" ? "sparse weights"
                                                                       : "transformed (rotated) weights";
      return r.refuse(key, what + " is not supported");
    }
  }
  auto groups = qc.find("config_groups");
  if (groups == qc.end() || !groups->is_object() || groups->empty()) {
    return r.bad("config_groups", "missing or empty (an object of groups)");
  }
  for (auto it = groups->begin(); it != groups->end(); ++it) {
    NS_RETURN_IF_ERROR(read_group(r, it.key().substr(0, 48), it.value(), q));
  }
  return Status::ok_status();
}

Status read_transformers_fp8(const QuantReader& r, const json& qc, HfFp8* q) {
  q->method = HfFp8::Method::kFp8;
  if (auto a = qc.find("activation_scheme"); a != qc.end() && !a->is_null()) {
    if (!a->is_string()) return r.bad("activation_scheme", "expected a string");
    if (a->get<std::string>() != "dynamic") {
      return r.refuse("activation_scheme", "'" + a->get<std::string>().substr(0, 16) +
                                               "': static activation scales are not supported (dynamic is)");
    }
  }
  auto b = qc.find("weight_block_size");
  if (b == qc.end()) {  // FineGrainedFP8Config's default
    q->block_rows = q->block_cols = 128;
  } else if (b->is_null()) {
    q->tensor = true;
  } else {
    NS_RETURN_IF_ERROR(read_block(r, *b, "weight_block_size", &q->block_rows, &q->block_cols));
  }
  return Status::ok_status();
}

}  // namespace

std::string HfFp8::describe() const {
  if (method == Method::kNone) return "none";
  std::string s = method == Method::kFp8 ? "fp8" : "compressed-tensors FP8";
  std::string kinds;
  if (channel) kinds += "per channel";
  if (tensor) kinds += std::string(kinds.empty() ? "" : ", ") + "per tensor";
  if (block_rows > 0) {
    kinds += std::string(kinds.empty() ? "" : ", ") + std::to_string(block_rows) + " x " +
             std::to_string(block_cols) + " blocks";
  }
  return s + " (" + kinds + ")";
}

StatusOr<HfFp8> read_hf_fp8(const json& config, const std::string& name) {
  HfFp8 q;
  auto it = config.find("quantization_config");
  if (it == config.end() || it->is_null()) return q;
  const QuantReader r(name);
  const json& qc = *it;
  if (!qc.is_object()) return invalid_argument(name + ": 'quantization_config': expected an object");
  auto m = qc.find("quant_method");
  if (m == qc.end() || !m->is_string()) return r.bad("quant_method", "missing or not a string");
  const std::string method = m->get<std::string>();
  if (method == "compressed-tensors") {
    NS_RETURN_IF_ERROR(read_compressed_tensors(r, qc, &q));
  } else if (method == "fp8") {
    NS_RETURN_IF_ERROR(read_transformers_fp8(r, qc, &q));
  } else {
    return r.refuse("quant_method",
                    "'" + method.substr(0, 32) +
                        "' is not supported (FP8 checkpoints of compressed-tensors and fp8 are; "
                        "other quantizations load as GGUF files)");
  }
  return q;
}

StatusOr<Fp8Weight> read_fp8_weight(const SafetensorsCheckpoint& ckpt, const HfFp8& fp8,
                                    const std::string& name) {
  const std::string where = ckpt.folder() + ": tensor '" + name.substr(0, 200) + "'";
  NS_ASSIGN_OR_RETURN(Tensor w, ckpt.tensor(name));
  if (!fp8.any()) {
    return invalid_argument(where + " is F8_E4M3 but config.json has no quantization_config to scale it");
  }
  if (w.ndim() != 2 || !name.ends_with(".weight")) {
    return invalid_argument(where + " is F8_E4M3 of shape " + w.shape_string() +
                            ": FP8 is read for 2-D linear weights only");
  }
  const int64_t N = w.dim(0), K = w.dim(1);
  const std::string scale_name = name.substr(0, name.size() - 6) + fp8.scale_suffix();
  const std::string swhere = ckpt.folder() + ": tensor '" + scale_name.substr(0, 200) + "'";
  if (ckpt.find_tensor(scale_name) == nullptr) {
    return invalid_argument(where + " is F8_E4M3 but its scale '" + scale_name.substr(0, 200) +
                            "' is missing");
  }
  NS_ASSIGN_OR_RETURN(Tensor s, ckpt.tensor(scale_name));
  if (s.dtype() != DType::kF32 && s.dtype() != DType::kBF16 && s.dtype() != DType::kF16) {
    return invalid_argument(swhere + " is " + dtype_name(s.dtype()) + ", expected F32, BF16 or F16");
  }
  std::vector<float> sv(static_cast<size_t>(s.numel()));
  dequantize_row(s.dtype(), s.data(), sv.data(), s.numel());
  for (size_t i = 0; i < sv.size(); ++i) {
    if (!std::isfinite(sv[i])) {
      return invalid_argument(swhere + ": scale " + std::to_string(i) + " is not finite");
    }
  }
  const auto& sh = s.shape();
  const int64_t br = fp8.block_rows, bc = fp8.block_cols;
  Fp8Weight out;
  out.w = w;
  if (fp8.channel && ((sh.size() == 2 && sh[0] == N && sh[1] == 1) || (sh.size() == 1 && sh[0] == N))) {
    out.kind = Fp8Scales::kChannel;
  } else if (fp8.tensor && s.numel() == 1 && sh.size() <= 2) {
    out.kind = Fp8Scales::kTensor;
    sv.assign(static_cast<size_t>(N), sv[0]);
  } else if (br > 0 && sh.size() == 2 && sh[0] == (N + br - 1) / br && sh[1] == (K + bc - 1) / bc) {
    out.kind = Fp8Scales::kBlock;
    out.block_rows = br;
    out.block_cols = bc;
  } else {
    std::string want;
    if (fp8.channel) want += shape_str({N, 1}) + " (per channel)";
    if (fp8.tensor) want += std::string(want.empty() ? "" : " or ") + "[1] (per tensor)";
    if (br > 0) {
      want += std::string(want.empty() ? "" : " or ") + shape_str({(N + br - 1) / br, (K + bc - 1) / bc}) +
              " (" + std::to_string(br) + " x " + std::to_string(bc) + " blocks)";
    }
    return invalid_argument(swhere + " has shape " + s.shape_string() + "; for the weight " +
                            w.shape_string() + " the config's " + fp8.describe() + " scales need " + want);
  }
  const auto* bytes = static_cast<const uint8_t*>(w.data());
  for (int64_t i = 0; i < w.numel(); ++i) {
    if ((bytes[i] & 0x7f) == 0x7f) {
      return invalid_argument(where + ": element " + std::to_string(i) + " is an E4M3 NaN (0x" +
                              (bytes[i] == 0xff ? "ff" : "7f") + ")");
    }
  }
  out.scale = Tensor::empty(DType::kF32, out.kind == Fp8Scales::kBlock ? sh : Dims{N});
  std::copy(sv.begin(), sv.end(), out.scale.data_as<float>());
  return out;
}

Tensor dequantize_fp8(const Fp8Weight& f, DType dtype) {
  const int64_t N = f.w.dim(0), K = f.w.dim(1);
  Tensor out = Tensor::empty(dtype, {N, K});
  const auto* w = static_cast<const uint8_t*>(f.w.data());
  const float* s = f.scale.data_as<const float>();
  const int64_t scale_cols = f.kind == Fp8Scales::kBlock ? f.scale.dim(1) : 0;
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < K; ++k) {
      const float sc =
          f.kind == Fp8Scales::kBlock ? s[(n / f.block_rows) * scale_cols + k / f.block_cols] : s[n];
      row[static_cast<size_t>(k)] = f8e4m3_to_f32(w[n * K + k]) * sc;
    }
    if (dtype == DType::kF32) {
      std::copy(row.begin(), row.end(), out.data_as<float>() + n * K);
    } else {
      NS_CHECK(dtype == DType::kBF16) << "dequantize_fp8 to " << dtype_name(dtype);
      uint16_t* o = out.data_as<uint16_t>() + n * K;
      for (int64_t k = 0; k < K; ++k) o[k] = f32_to_bf16(row[static_cast<size_t>(k)]);
    }
  }
  return out;
}

}  // namespace nanoserve
