#include "model/model_source.h"

#include <algorithm>
#include <filesystem>

#include "io/gguf.h"
#include "io/hf_cache.h"
#include "io/hf_hub.h"
#include "io/json_file.h"
#include "io/safetensors_checkpoint.h"
#include "model/config_hf.h"
#include "model/dummy_weights.h"
#include "model/hf_weights.h"
#include "model/model_shapes.h"
#include "model/rope_layout.h"
#include "tokenizer/hf_tokenizer.h"

namespace nanoserve {

namespace {

namespace fs = std::filesystem;

struct Tokenized {
  ModelConfig config;
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const GgufFile> gguf;
  HfFp8 fp8;  // an HF folder's quantization_config
};

// The config and tokenizer of a GGUF file (its tensors stay unread).
StatusOr<Tokenized> open_gguf(const std::string& path) {
  Tokenized t;
  NS_ASSIGN_OR_RETURN(t.gguf, GgufFile::open(path));
  NS_ASSIGN_OR_RETURN(t.config, config_from_gguf(*t.gguf));
  NS_ASSIGN_OR_RETURN(t.tokenizer, Tokenizer::from_gguf(*t.gguf));
  return t;
}

// eos_token_id of generation_config.json, when the folder has one.
Status read_generation_eos(const fs::path& dir, std::vector<int32_t>* eos) {
  const fs::path p = dir / "generation_config.json";
  if (!fs::exists(p)) return Status::ok_status();
  NS_ASSIGN_OR_RETURN(nlohmann::json j, read_json_file(p.string(), uint64_t{1} << 20));
  if (!j.is_object() || !j.contains("eos_token_id")) return Status::ok_status();
  const nlohmann::json& e = j["eos_token_id"];
  auto one = [&](const nlohmann::json& x) -> Status {
    if (!x.is_number_unsigned() || x.get<uint64_t>() > INT32_MAX) {
      return invalid_argument(p.string() + ": 'eos_token_id': expected token ids");
    }
    eos->push_back(static_cast<int32_t>(x.get<uint64_t>()));
    return Status::ok_status();
  };
  if (e.is_array()) {
    for (const auto& x : e) NS_RETURN_IF_ERROR(one(x));
  } else if (!e.is_null()) {
    NS_RETURN_IF_ERROR(one(e));
  }
  return Status::ok_status();
}

// The config and tokenizer of an HF folder (its weights stay unread).
StatusOr<Tokenized> open_hf(const std::string& path) {
  const fs::path dir(path);
  NS_ASSIGN_OR_RETURN(HfModelConfig hf, config_from_hf_file((dir / "config.json").string()));
  NS_ASSIGN_OR_RETURN(VocabData vocab, vocab_from_hf_folder(path));
  NS_RETURN_IF_ERROR(read_generation_eos(dir, &hf.eos_ids));
  const auto n = static_cast<int32_t>(vocab.tokens.size());
  if (vocab.bos_id < 0 && hf.bos_id >= 0 && hf.bos_id < n) vocab.bos_id = hf.bos_id;
  for (int32_t id : hf.eos_ids) {
    if (id < 0 || id >= n) continue;  // ids past the tokenizer never come out of it
    if (vocab.eos_id < 0) vocab.eos_id = id;
    vocab.extra_eos_ids.push_back(id);
  }
  Tokenized t;
  t.config = hf.config;
  t.fp8 = hf.fp8;
  NS_ASSIGN_OR_RETURN(t.tokenizer, Tokenizer::from_vocab(std::move(vocab)));
  return t;
}

StatusOr<Tokenized> open_config_and_tokenizer(const std::string& path) {
  NS_ASSIGN_OR_RETURN(LoadFormat f, detect_load_format(path));
  return f == LoadFormat::kGguf ? open_gguf(path) : open_hf(path);
}

// --tokenizer: the tokenizer of another file or folder replaces the model's
// (load_engine still checks that it fits the model's vocabulary).
Status use_tokenizer_of(const ModelSpec& spec, ModelSource* src) {
  if (spec.tokenizer_path.empty() || spec.tokenizer_path == spec.path) return Status::ok_status();
  NS_ASSIGN_OR_RETURN(Tokenized t, open_config_and_tokenizer(spec.tokenizer_path));
  src->tokenizer = std::move(t.tokenizer);
  return Status::ok_status();
}

}  // namespace

const char* load_format_name(LoadFormat f) {
  switch (f) {
    case LoadFormat::kAuto: return "auto";
    case LoadFormat::kGguf: return "gguf";
    case LoadFormat::kSafetensors: return "safetensors";
    case LoadFormat::kDummy: return "dummy";
  }
  return "?";
}

StatusOr<LoadFormat> parse_load_format(std::string_view name) {
  for (LoadFormat f : {LoadFormat::kAuto, LoadFormat::kGguf, LoadFormat::kSafetensors, LoadFormat::kDummy}) {
    if (name == load_format_name(f)) return f;
  }
  return invalid_argument("--load-format: '" + std::string(name.substr(0, 32)) +
                          "' is not one of auto, gguf, safetensors, dummy");
}

StatusOr<LoadFormat> detect_load_format(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return not_found("model '" + path + "': no such file or folder");
  if (fs::is_directory(st)) {
    if (!fs::exists(fs::path(path) / "config.json")) {
      return not_found("model folder '" + path +
                       "': no config.json (a Hugging Face folder needs config.json, "
                       "*.safetensors and tokenizer.json)");
    }
    return LoadFormat::kSafetensors;
  }
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".safetensors" || ext == ".json") {
    return invalid_argument("model '" + path +
                            "': give the folder that holds config.json, not one of its files");
  }
  return LoadFormat::kGguf;
}

StatusOr<std::unique_ptr<Tokenizer>> open_model_tokenizer(const std::string& path) {
  NS_ASSIGN_OR_RETURN(Tokenized t, open_config_and_tokenizer(path));
  return std::move(t.tokenizer);
}

StatusOr<ResolvedModel> resolve_model_path(const std::string& model, const std::string& revision,
                                           const std::string& download_dir, bool progress) {
  std::error_code ec;
  if (fs::exists(model, ec) || !is_hub_repo_id(model)) {
    if (!revision.empty()) {
      return invalid_argument("--revision " + revision +
                              ": a revision is of a hub model (org/name); MODEL '" + model +
                              "' is a local path");
    }
    return ResolvedModel{model, ""};
  }
  HubOptions o;
  o.cache_dir = hf_cache_dir(download_dir);
  o.progress = progress;
  NS_ASSIGN_OR_RETURN(std::string snapshot, hub_model_snapshot(model, revision, o));
  return ResolvedModel{snapshot, model};
}

StatusOr<ModelConfig> read_model_config(const ModelSpec& spec) {
  if (spec.format == LoadFormat::kDummy && !spec.model_shape.empty()) return model_shape(spec.model_shape);
  LoadFormat format = spec.format;
  if (format == LoadFormat::kAuto || format == LoadFormat::kDummy) {
    NS_ASSIGN_OR_RETURN(format, detect_load_format(spec.path));
  }
  if (format == LoadFormat::kGguf) {
    NS_ASSIGN_OR_RETURN(std::shared_ptr<const GgufFile> gguf, GgufFile::open(spec.path));
    return config_from_gguf(*gguf);
  }
  NS_ASSIGN_OR_RETURN(HfModelConfig hf, config_from_hf_file((fs::path(spec.path) / "config.json").string()));
  return hf.config;
}

std::string ModelSource::describe() const {
  return std::string(load_format_name(format)) + " " + path + " (" +
         (tensors ? tensors->describe() : std::string("no tensors")) + ")";
}

StatusOr<ModelSource> open_model_source(const ModelSpec& spec) {
  ModelSource src;
  src.path = spec.path;
  LoadFormat format = spec.format;
  if (!spec.model_shape.empty() && format != LoadFormat::kDummy) {
    return invalid_argument("--model-shape " + spec.model_shape + " needs --load-format dummy");
  }
  if (format == LoadFormat::kAuto) {
    NS_ASSIGN_OR_RETURN(format, detect_load_format(spec.path));
  }
  src.format = format;

  if (format == LoadFormat::kDummy) {
    std::string shape_name = spec.model_shape;
    if (!spec.model_shape.empty()) {
      NS_ASSIGN_OR_RETURN(src.config, model_shape(spec.model_shape));
      const std::string& tok_path = spec.tokenizer_path.empty() ? spec.path : spec.tokenizer_path;
      NS_ASSIGN_OR_RETURN(Tokenized t, open_config_and_tokenizer(tok_path));
      src.tokenizer = std::move(t.tokenizer);
      src.path = tok_path;
    } else {
      NS_ASSIGN_OR_RETURN(Tokenized t, open_config_and_tokenizer(spec.path));
      src.config = t.config;
      src.tokenizer = std::move(t.tokenizer);
      shape_name = "of " + spec.path;
    }
    constexpr std::string_view kDummyArchs[] = {"llama", "qwen3", "qwen3moe", "gemma2", "gemma3", "gpt-oss"};
    if (std::find(std::begin(kDummyArchs), std::end(kDummyArchs), src.config.arch) == std::end(kDummyArchs)) {
      return unimplemented(
          "--load-format dummy: weights are built for llama, qwen3, qwen3moe, gemma2, gemma3 and gpt-oss "
          "only, not '" +
          src.config.arch.substr(0, 64) + "'");
    }
    src.config.rope_scaling.freq_factors_tensor = false;  // no rope_freqs.weight among dummy tensors
    src.tensors = std::make_shared<DummyTensors>(src.config, shape_name, spec.seed);
    return src;
  }

  if (format == LoadFormat::kGguf) {
    NS_ASSIGN_OR_RETURN(Tokenized t, open_gguf(spec.path));
    NS_RETURN_IF_ERROR(check_gguf_supported(*t.gguf, t.config));
    src.config = t.config;
    src.tokenizer = std::move(t.tokenizer);
    src.gguf = t.gguf;
    src.tensors = gguf_model_tensors(t.gguf, t.config);
    NS_RETURN_IF_ERROR(use_tokenizer_of(spec, &src));
    return src;
  }

  if (!fs::is_directory(spec.path)) {
    return invalid_argument("--load-format safetensors: '" + spec.path + "' is not a folder");
  }
  NS_ASSIGN_OR_RETURN(Tokenized t, open_hf(spec.path));
  NS_ASSIGN_OR_RETURN(auto ckpt, SafetensorsCheckpoint::open(spec.path));
  NS_ASSIGN_OR_RETURN(src.tensors, HfLlamaTensors::create(std::move(ckpt), t.config, t.fp8));
  src.config = t.config;
  src.tokenizer = std::move(t.tokenizer);
  NS_RETURN_IF_ERROR(use_tokenizer_of(spec, &src));
  return src;
}

}  // namespace nanoserve
