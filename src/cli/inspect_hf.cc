#include "cli/inspect_hf.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>

#include "io/safetensors_checkpoint.h"
#include "model/model_source.h"

namespace nanoserve::cli {

int run_inspect_hf(const std::string& folder, bool no_tensors) {
  ModelSpec spec;
  spec.path = folder;
  spec.format = LoadFormat::kSafetensors;
  auto src = open_model_source(spec);
  if (!src.ok()) {
    std::fprintf(stderr, "nanoserve inspect: %s\n", src.status().to_string().c_str());
    return 1;
  }
  auto ckpt = SafetensorsCheckpoint::open(folder);  // opened again for the listing; it is only mappings
  if (!ckpt.ok()) {
    std::fprintf(stderr, "nanoserve inspect: %s\n", ckpt.status().to_string().c_str());
    return 1;
  }
  std::printf("folder: %s\n  Hugging Face safetensors, %zu shard%s, %zu tensors\n", folder.c_str(),
              (*ckpt)->shards().size(), (*ckpt)->shards().size() == 1 ? "" : "s", (*ckpt)->names().size());
  for (const auto& shard : (*ckpt)->shards()) {
    std::printf("  shard %s: %" PRIu64 " bytes, header %" PRIu64 " bytes, %zu tensors\n",
                shard->name().c_str(), shard->file_size(), shard->data_offset() - 8, shard->tensors().size());
  }
  std::printf("config: %s\n", src->config.to_string().c_str());
  const Tokenizer& tok = *src->tokenizer;
  std::string eos;
  for (int32_t id : tok.eos_ids()) eos += (eos.empty() ? "" : ", ") + std::to_string(id);
  std::printf(
      "tokenizer: byte-level BPE, %d tokens, pre-tokenizer %s, bos %d%s, end ids [%s], chat template %s\n",
      tok.n_vocab(), tok.vocab().pre.c_str(), tok.bos_id(), tok.add_bos() ? " (added)" : "", eos.c_str(),
      tok.chat_template().empty() ? "none" : "yes");
  if (no_tensors) return 0;
  std::map<std::string, std::pair<int64_t, int64_t>> by_dtype;  // count, bytes
  size_t width = 4;
  for (const std::string& name : (*ckpt)->names()) width = std::max(width, std::min<size_t>(name.size(), 56));
  std::printf("tensors:\n");
  for (const std::string& name : (*ckpt)->names()) {
    const SafetensorsTensorInfo* t = (*ckpt)->find_tensor(name);
    std::string shape = "[";
    for (size_t i = 0; i < t->shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(t->shape[i]);
    shape += "]";
    const auto bytes = static_cast<int64_t>(t->end - t->begin);
    std::printf("  %-*s  %-16s %-5s %12" PRId64 "\n", static_cast<int>(width), name.substr(0, 56).c_str(),
                shape.c_str(), dtype_name(t->dtype), bytes);
    auto& tot = by_dtype[dtype_name(t->dtype)];
    tot.first += 1;
    tot.second += bytes;
  }
  for (const auto& [name, tot] : by_dtype) {
    std::printf("  %-5s %4" PRId64 " tensors %14" PRId64 " bytes\n", name.c_str(), tot.first, tot.second);
  }
  return 0;
}

}  // namespace nanoserve::cli
