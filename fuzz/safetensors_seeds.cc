// Writes the safetensors fuzzer's seed corpus into the directory given as
// argv[1]: every crafted bad file (tests/io/safetensors_bad_corpus.h) and a
// few valid ones.

#include <cstdio>
#include <fstream>
#include <string>

#include "io/safetensors_bad_corpus.h"
#include "io/safetensors_builder.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  int n = 0;
  auto write = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
    std::ofstream f(dir + "/" + name + ".safetensors", std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    ++n;
  };
  using namespace nanoserve::testing;
  for (const auto& c : bad_safetensors_corpus()) write("bad_" + c.name, c.bytes);
  write("good_small", good_safetensors().build());
  SafetensorsBuilder layer;
  layer.metadata = "{\"format\":\"pt\",\"total_size\":\"96\"}";
  layer.tensor("model.layers.0.self_attn.q_proj.weight", "BF16", "[4, 4]", std::vector<uint8_t>(32, 0x3f));
  layer.tensor("model.layers.0.input_layernorm.weight", "F32", "[4]", f32_le({1, 1, 1, 1}));
  layer.tensor("model.embed_tokens.weight", "F16", "[6, 4]", std::vector<uint8_t>(48, 0x3c));
  layer.tensor("empty", "F32", "[0, 4]", {});
  write("good_layer", layer.build());
  std::printf("fuzz seeds: wrote %d files to %s\n", n, dir.c_str());
  return 0;
}
