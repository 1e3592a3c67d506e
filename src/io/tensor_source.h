#pragma once
// Where a model's weights come from: a source of named tensors. The model
// asks for tensors by its own (GGUF) names; each source maps them onto its
// storage: a GGUF file as it is, a Hugging Face checkpoint through a name map
// (model/hf_weights.h), random weights of a shape (model/dummy_weights.h).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "core/tensor.h"

namespace nanoserve {

class GgufFile;

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // "gguf models/x.gguf", "safetensors models/hf", "dummy llama-3-8b (seed 0)"
  virtual std::string describe() const = 0;
  virtual bool contains(std::string_view name) const = 0;
  // The tensor in its stored dtype (a view that keeps its storage alive, or
  // owned memory); NOT_FOUND naming the tensor if absent.
  virtual StatusOr<Tensor> tensor(std::string_view name) const = 0;
  // True when tensor() builds every weight in memory rather than viewing a
  // mapping: a CPU model then checks that they fit before it loads.
  virtual bool materializes() const { return false; }
  // How a message names the tensor: the stored name, with the model's name
  // beside it where they differ ("model.layers.0.mlp.up_proj.weight (blk.0.ffn_up.weight)").
  virtual std::string display_name(std::string_view name) const { return std::string(name); }

  // FP8 weights (a Hugging Face FP8 checkpoint: model/hf_fp8.h). tensor()
  // returns them dequantized, unless this source came from with_fp8_rows().
  //
  // This source with the FP8 linears whose scales are one a row (per channel,
  // per tensor) returned as stored, F8_E4M3 rows beside row_scales(), for a
  // device that computes with them; null when the source holds none. Its
  // other FP8 weights (block-wise scales) come dequantized to bf16.
  virtual std::shared_ptr<const TensorSource> with_fp8_rows() const { return nullptr; }
  // The scales of a weight tensor() returns as F8_E4M3: [rows] f32, row n
  // standing for w[n, :] * scale[n]. NOT_FOUND for any other tensor.
  virtual StatusOr<Tensor> row_scales(std::string_view name) const {
    return not_found("no FP8 row scales for '" + std::string(name.substr(0, 200)) + "'");
  }
};

// The tensors of a GGUF file, by their own names.
class GgufTensorSource final : public TensorSource {
 public:
  explicit GgufTensorSource(std::shared_ptr<const GgufFile> file) : file_(std::move(file)) {}
  std::string describe() const override;
  bool contains(std::string_view name) const override;
  StatusOr<Tensor> tensor(std::string_view name) const override;
  const std::shared_ptr<const GgufFile>& file() const { return file_; }

 private:
  std::shared_ptr<const GgufFile> file_;
};

}  // namespace nanoserve
