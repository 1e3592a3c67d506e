#pragma once
// The real Engine over the fake model (tests/engine/fake_model.h), with a
// byte-level codec and text stream, so the server is tested against the
// engine it serves with and an exact oracle for every greedy request.
//
// FakeCodec: ids 0..127 are ASCII bytes (others encode as '?'); 128 is
// end-of-sequence, 129/130 are the chat markers <|im_start|>/<|im_end|>.
// Greedy output is testing::fake_greedy over that vocabulary.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "engine/engine.h"
#include "engine/fake_model.h"
#include "server/model_codec.h"

namespace nanoserve::server::testing {

inline constexpr int32_t kFakeEos = 128;
inline constexpr int32_t kFakeImStart = 129;
inline constexpr int32_t kFakeImEnd = 130;
inline constexpr int64_t kFakeVocab = 131;

inline std::string fake_token_text(int32_t id) {
  if (id < 128) return std::string(1, static_cast<char>(id));
  if (id == kFakeImStart) return "<|im_start|>";
  if (id == kFakeImEnd) return "<|im_end|>";
  return "";
}

class FakeCodec : public ModelCodec {
 public:
  StatusOr<std::vector<int32_t>> encode(std::string_view text, bool) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c < 128 ? c : '?');
    return ids;
  }
  using ModelCodec::encode_chat;
  StatusOr<std::vector<int32_t>> encode_chat(const std::vector<ChatMessage>& messages,
                                             const ChatTemplateRequest& options) const override {
    const bool add_generation_prompt = options.add_generation_prompt;
    std::vector<int32_t> ids;
    auto add = [&](const std::string& s) {
      for (unsigned char c : s) ids.push_back(c < 128 ? c : '?');
    };
    for (const ChatMessage& m : messages) {
      ids.push_back(kFakeImStart);
      add(m.role + "\n" + m.content);
      ids.push_back(kFakeImEnd);
    }
    if (add_generation_prompt) {
      ids.push_back(kFakeImStart);
      add("assistant\n");
    }
    return ids;
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string s;
    for (int32_t id : ids) s += token_text(id);
    return s;
  }
  std::string token_text(int32_t id) const override { return fake_token_text(id); }
  int64_t vocab_size() const override { return kFakeVocab; }
};

// The engine's text for FakeCodec ids, one token at a time.
class FakeCodecText final : public TextStreamFactory {
 public:
  std::vector<int32_t> eos_ids() const override { return {kFakeEos}; }
  std::unique_ptr<TextStream> open(std::span<const int32_t>) const override {
    return std::make_unique<Stream>();
  }

 private:
  struct Stream final : TextStream {
    void push(int32_t token, std::string& out) override { out += fake_token_text(token); }
  };
};

struct EngineRigOptions {
  int32_t max_num_seqs = 8;
  int32_t num_blocks = 1024;
  int32_t block_size = 4;
  int32_t max_num_batched_tokens = 256;
  std::optional<int64_t> swap_space_bytes;  // the fake's block is 64 bytes at block_size 4
};

// An Engine over a FakeModel of kFakeVocab tokens.
struct EngineRig {
  explicit EngineRig(const EngineRigOptions& o = {}) {
    EngineConfig c;
    c.max_num_seqs = o.max_num_seqs;
    c.num_blocks = o.num_blocks;
    c.block_size = o.block_size;
    c.max_num_batched_tokens = o.max_num_batched_tokens;
    c.swap_space_bytes = o.swap_space_bytes;
    auto m = std::make_unique<nanoserve::testing::FakeModel>(static_cast<int32_t>(kFakeVocab),
                                                             o.max_num_batched_tokens, o.max_num_seqs);
    model = m.get();
    auto e = Engine::create(c, std::move(m), &text);
    NS_CHECK(e.ok()) << e.status().to_string();
    engine = std::move(e).value();
  }

  // What greedy decoding of `prompt` gives: at most n tokens, stopping at eos (not ignore_eos).
  static std::vector<int32_t> greedy_tokens(const std::vector<int32_t>& prompt, int32_t n) {
    return nanoserve::testing::fake_greedy(prompt, static_cast<int32_t>(kFakeVocab), n, kFakeEos);
  }
  static std::string greedy_text(const std::vector<int32_t>& prompt, int32_t n) {
    std::string s;
    for (int32_t t : greedy_tokens(prompt, n)) s += fake_token_text(t);
    return s;
  }
  static std::vector<int32_t> bytes(const std::string& s) { return *FakeCodec().encode(s, false); }

  FakeCodecText text;
  nanoserve::testing::FakeModel* model = nullptr;  // owned by the engine
  std::unique_ptr<Engine> engine;
};

}  // namespace nanoserve::server::testing
