#pragma once
// The one place that decides where a model comes from. A path names either a
// GGUF file or a Hugging Face folder (config.json, *.safetensors, tokenizer.json);
// --load-format dummy builds random weights of a named shape (or of the shape
// the path describes) with a real tokenizer. The result is what the model
// loads from: a ModelConfig, named tensors and a tokenizer.
//
//   format auto   a folder -> safetensors, a file -> gguf
//   gguf          PATH is a .gguf file: config, tensors and tokenizer from it
//   safetensors   PATH is a folder: config.json, the checkpoint (model/hf_weights.h),
//                 tokenizer.json + tokenizer_config.json; config.json's (and
//                 generation_config.json's) eos_token_id ids also end generation
//   dummy         --model-shape NAME (model/model_shapes.h), tokenizer from
//                 tokenizer_path; or, without a shape, the config and tokenizer
//                 of PATH with none of its weights read. A vocabulary larger
//                 than the tokenizer's is allowed: the extra ids decode to nothing.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "io/tensor_source.h"
#include "model/config.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve {

class GgufFile;

enum class LoadFormat { kAuto, kGguf, kSafetensors, kDummy };
const char* load_format_name(LoadFormat f);
// "auto", "gguf", "safetensors", "dummy"; INVALID_ARGUMENT otherwise.
StatusOr<LoadFormat> parse_load_format(std::string_view name);

struct ModelSpec {
  std::string path;    // a .gguf file or an HF folder
  std::string hub_id;  // "org/name" when `path` is that hub model's snapshot (resolve_model_path)
  LoadFormat format = LoadFormat::kAuto;
  std::string model_shape;     // dummy only: a name of model_shape_names()
  std::string tokenizer_path;  // a GGUF file or HF folder whose tokenizer replaces the model's (dummy
                               // with a shape: the only tokenizer)
  uint64_t seed = 0;           // dummy weights
};

struct ModelSource {
  LoadFormat format = LoadFormat::kAuto;  // resolved: never kAuto
  std::string path;
  ModelConfig config;
  std::shared_ptr<const TensorSource> tensors;
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const GgufFile> gguf;  // the file, when format is gguf
  std::string describe() const;          // "safetensors models/x (config.json, 1 shard)"
};

// What `path` is: a folder -> kSafetensors, a file -> kGguf. NOT_FOUND if it
// does not exist; INVALID_ARGUMENT for a lone .safetensors or .json file.
StatusOr<LoadFormat> detect_load_format(const std::string& path);

StatusOr<ModelSource> open_model_source(const ModelSpec& spec);

// MODEL as a command takes it. A path that exists is that path (never a
// download). Otherwise "org/name" is a hub id: its snapshot folder at
// `revision` ("" = main) in the Hugging Face cache (`download_dir`, else the
// environment's; io/hf_cache.h), downloaded there when absent (io/hf_hub.h;
// a progress line per file when `progress`). This is the one place a
// download starts. Anything else is NOT_FOUND naming it.
struct ResolvedModel {
  std::string path;
  std::string hub_id;  // empty for a local path
};
StatusOr<ResolvedModel> resolve_model_path(const std::string& model, const std::string& revision,
                                           const std::string& download_dir, bool progress);

// Only the ModelConfig the spec describes (a GGUF file's metadata, config.json,
// or the named shape), with no tensor or tokenizer read: what a command checks
// its flags against (e.g. --max-model-len against context_length) before it
// starts anything.
StatusOr<ModelConfig> read_model_config(const ModelSpec& spec);

// Only the tokenizer of a GGUF file or HF folder (no weights are read), with
// the same end-of-generation ids as open_model_source.
StatusOr<std::unique_ptr<Tokenizer>> open_model_tokenizer(const std::string& path);

}  // namespace nanoserve
