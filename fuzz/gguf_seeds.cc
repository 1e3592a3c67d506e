// Writes the GGUF fuzzer's seed corpus into the directory given as argv[1]:
// every crafted bad file (tests/io/gguf_bad_corpus.h) and a few valid ones.

#include <cstdio>
#include <fstream>
#include <string>

#include "io/gguf_bad_corpus.h"
#include "io/gguf_builder.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  int n = 0;
  auto write = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
    std::ofstream f(dir + "/" + name + ".gguf", std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    ++n;
  };
  using namespace nanoserve::testing;
  for (const auto& c : bad_gguf_corpus()) {
    if (c.seed) write("bad_" + c.name, c.bytes);
  }
  write("good_rich_v3", rich_gguf(3).build());
  write("good_rich_v2", rich_gguf(2).build());
  // Every quantized dtype, so the dequantize paths are reached.
  write("good_all_dtypes",
        GgufBuilder()
            .kv_string("general.architecture", "llama")
            .kv_u32("llama.block_count", 1)
            .kv_u32("llama.embedding_length", 256)
            .kv_u32("llama.feed_forward_length", 256)
            .kv_u32("llama.context_length", 64)
            .kv_u32("llama.attention.head_count", 4)
            .kv_u32("llama.vocab_size", 2)
            .tensor("f16", {32, 2}, kGgmlF16, std::vector<uint8_t>(128, 0x3c))
            .tensor("bf16", {32}, kGgmlBF16, std::vector<uint8_t>(64, 0x3f))
            .tensor("q4_0", {32}, kGgmlQ4_0, std::vector<uint8_t>(18, 0x21))
            .tensor("q4_1", {32}, kGgmlQ4_1, std::vector<uint8_t>(20, 0x21))
            .tensor("q8_0", {32}, kGgmlQ8_0, std::vector<uint8_t>(34, 0x21))
            .tensor("q4_k", {256}, kGgmlQ4_K, std::vector<uint8_t>(144, 0x21))
            .tensor("q6_k", {256}, kGgmlQ6_K, std::vector<uint8_t>(210, 0x21))
            .tensor("token_embd.weight", {256, 2}, kGgmlQ8_0, std::vector<uint8_t>(8 * 34, 0x01))
            .build());
  std::printf("fuzz seeds: wrote %d files to %s\n", n, dir.c_str());
  return 0;
}
