// tokenizer.json into the engine's tokenizer: both merge forms, added tokens,
// tokenizer_config.json, refusals by name, and, on the default model's HF
// export, id-for-id agreement with the GGUF tokenizer and with Hugging Face's
// ids in tests/fixtures/tokenizer/parity.json.

#include "tokenizer/hf_tokenizer.h"

#include <gtest/gtest.h>

#include <functional>

#include "model/hf_fixture.h"
#include "model/tiny_hf_model.h"
#include "tokenizer/default_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve {
namespace {

using nlohmann::json;

std::unique_ptr<Tokenizer> build(const json& tok, const json* cfg = nullptr) {
  auto v = vocab_from_hf_json(tok, cfg);
  EXPECT_TRUE(v.ok()) << v.status().to_string();
  if (!v.ok()) return nullptr;
  auto t = Tokenizer::from_vocab(std::move(v).value());
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(t).value() : nullptr;
}

TEST(HfTokenizer, PairAndStringMergesGiveTheSameIds) {
  auto pairs = build(testing::tiny_tokenizer_json(true));
  auto strings = build(testing::tiny_tokenizer_json(false));
  ASSERT_TRUE(pairs && strings);
  // h e l l o -> he ll o -> hell o
  EXPECT_EQ(pairs->encode("hello", false, true), (std::vector<int32_t>{260, 'o'}));
  for (const char* text : {"hello", "shell hello!", "hhee llll", "<|end|>hello"}) {
    EXPECT_EQ(pairs->encode(text, false, true), strings->encode(text, false, true)) << text;
  }
  EXPECT_EQ(pairs->decode(pairs->encode("shell hello!", false, true)), "shell hello!");
}

TEST(HfTokenizer, AddedTokensSpecialOrNot) {
  json j = testing::tiny_tokenizer_json();
  j["added_tokens"].push_back({{"id", 261}, {"content", "<tool>"}, {"special", false}});
  auto t = build(j);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->token_type(257), TokenType::kControl);
  EXPECT_EQ(t->token_type(261), TokenType::kUserDefined);
  EXPECT_EQ(t->encode("a<|end|>", false, true), (std::vector<int32_t>{'a', 257}));
  EXPECT_NE(t->encode("a<|end|>", false, false), (std::vector<int32_t>{'a', 257}));  // plain text
  EXPECT_EQ(t->encode("a<tool>", false, false), (std::vector<int32_t>{'a', 261}));   // always matched
}

TEST(HfTokenizer, TokenizerConfigGivesBosEosAndTemplate) {
  json cfg = {{"bos_token", "<|begin|>"},
              {"eos_token", {{"content", "<|end|>"}, {"special", true}}},
              {"add_bos_token", true},
              {"chat_template", "{% for m in messages %}{{ m['content'] }}{% endfor %}"}};
  auto t = build(testing::tiny_tokenizer_json(), &cfg);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->bos_id(), 256);
  EXPECT_EQ(t->eos_id(), 257);
  EXPECT_TRUE(t->is_eos(257));
  EXPECT_EQ(t->encode("hello", true, true), (std::vector<int32_t>{256, 260, 'o'}));
  EXPECT_EQ(t->chat_template(), cfg["chat_template"].get<std::string>());

  json listed = {{"chat_template",
                  {{{"name", "tool_use"}, {"template", "x"}}, {{"name", "default"}, {"template", "y"}}}}};
  auto t2 = build(testing::tiny_tokenizer_json(), &listed);
  ASSERT_TRUE(t2);
  EXPECT_EQ(t2->chat_template(), "y");
}

TEST(HfTokenizer, TemplateProcessingAddsBos) {
  json j = testing::tiny_tokenizer_json();
  j["post_processor"] = json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<|begin|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [], "special_tokens": {"<|begin|>": {"id": "<|begin|>", "ids": [256], "tokens": ["<|begin|>"]}}})");
  auto t = build(j);
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->add_bos());
  EXPECT_EQ(t->encode("hello", true, true).front(), 256);
  EXPECT_EQ(t->encode("hello", false, true).front(), 260);
}

TEST(HfTokenizer, KnownPreTokenizersAreRecognised) {
  json j = testing::tiny_tokenizer_json();
  j["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Digits", "individual_digits": true},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}]})");
  auto v = vocab_from_hf_json(j, nullptr);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->pre, "smollm");
  // Meta-Llama-3's pipeline (with its ignore_merges).
  j["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
       "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]})");
  j["model"]["ignore_merges"] = true;
  v = vocab_from_hf_json(j, nullptr);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->pre, "llama-bpe");
}

// Shapes that used to be refused for not being a known pipeline: they load, through the components.
TEST(HfTokenizer, PipelinesWithoutAFastPathLoadThroughTheComponents) {
  const std::function<void(json&)> edits[] = {
      [](json& j) {
        j["normalizer"] = {{"type", "NFKC"}};
      },
      [](json& j) {
        j["normalizer"] = {{"type", "Lowercase"}};
      },
      [](json& j) { j["pre_tokenizer"] = nullptr; },
      [](json& j) { j["pre_tokenizer"]["add_prefix_space"] = true; },
      [](json& j) { j["model"]["byte_fallback"] = true; },
      [](json& j) { j["model"]["ignore_merges"] = true; },
      [](json& j) {
        j["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
           {"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated", "invert": false},
           {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})");
      },
      [](json& j) {
        j["pre_tokenizer"] = {
            {"type", "Sequence"},
            {"pretokenizers", {{{"type", "Whitespace"}}, {{"type", "Digits"}}, {{"type", "ByteLevel"}}}}};
      },
  };
  for (size_t i = 0; i < std::size(edits); ++i) {
    json j = testing::tiny_tokenizer_json();
    edits[i](j);
    auto v = vocab_from_hf_json(j, nullptr);
    ASSERT_TRUE(v.ok()) << i << ": " << v.status().to_string();
    EXPECT_NE(v->hf_pipeline, nullptr) << i;
    auto t = Tokenizer::from_vocab(std::move(v).value());
    ASSERT_TRUE(t.ok()) << i << ": " << t.status().to_string();
    EXPECT_FALSE((*t)->encode("hello 12", false, true).empty()) << i;
  }
}

struct Refusal {
  const char* what;
  std::function<void(json&)> edit;
  StatusCode code;
  const char* needle;
};

TEST(HfTokenizer, RefusesOtherKindsByName) {
  const StatusCode kUn = StatusCode::kUnimplemented, kDL = StatusCode::kDataLoss;
  const Refusal cases[] = {
      {"wordpiece", [](json& j) { j["model"]["type"] = "WordPiece"; }, kUn, "'model': 'WordPiece'"},
      {"unigram", [](json& j) { j["model"]["type"] = "Unigram"; }, kUn, "'Unigram' is not supported"},
      {"precompiled",
       [](json& j) {
         j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}};
       },
       kUn, "'normalizer': 'Precompiled' is not supported"},
      {"nested normalizer",
       [](json& j) {
         j["normalizer"] = {
             {"type", "Sequence"},
             {"normalizers",
              {{{"type", "NFC"}}, {{"type", "Sequence"}, {"normalizers", {{{"type", "Nmt"}}}}}}}};
       },
       kUn, "'normalizer.normalizers[1].normalizers[0]': 'Nmt'"},
      {"unicode scripts",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "UnicodeScripts"}};
       },
       kUn, "'pre_tokenizer': 'UnicodeScripts'"},
      {"fixed length in a sequence",
       [](json& j) {
         j["pre_tokenizer"] = {
             {"type", "Sequence"},
             {"pretokenizers",
              {{{"type", "Whitespace"}}, {{"type", "FixedLength"}}, {{"type", "ByteLevel"}}}}};
       },
       kUn, "'pre_tokenizer.pretokenizers[1]': 'FixedLength'"},
      {"regex without a PCRE2 spelling",
       [](json& j) {
         j["pre_tokenizer"] = json::parse(R"({"type": "Split", "pattern": {"Regex": "[\\S\\d]+"},
                                              "behavior": "Isolated", "invert": false})");
       },
       kUn, "'pre_tokenizer.pattern'"},
      {"split behavior",
       [](json& j) {
         j["pre_tokenizer"] = json::parse(R"({"type": "Split", "pattern": {"String": " "},
                                              "behavior": "Sideways", "invert": false})");
       },
       kDL, "'pre_tokenizer.behavior': 'Sideways'"},
      {"decoder",
       [](json& j) {
         j["decoder"] = {{"type", "WordPiece"}};
       },
       kUn, "'decoder': 'WordPiece'"},
      {"decoder in a sequence",
       [](json& j) {
         j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "Fuse"}}, {{"type", "CTC"}}}}};
       },
       kUn, "'decoder.decoders[1]': 'CTC'"},
      {"post",
       [](json& j) {
         j["post_processor"] = {{"type", "Postprocessor9"}};
       },
       kUn, "'post_processor': 'Postprocessor9'"},
      {"post without cls",
       [](json& j) {
         j["post_processor"] = {{"type", "BertProcessing"}};
       },
       kDL, "'post_processor.cls'"},
      {"dropout", [](json& j) { j["model"]["dropout"] = 0.1; }, kUn, "'model.dropout'"},
      {"suffix", [](json& j) { j["model"]["end_of_word_suffix"] = "</w>"; }, kUn,
       "'model.end_of_word_suffix'"},
      {"single word", [](json& j) { j["added_tokens"][0]["single_word"] = true; }, kUn,
       "'added_tokens[0].single_word'"},
      {"added conflict", [](json& j) { j["added_tokens"][1]["id"] = 104; }, kDL, "'added_tokens[1]'"},
      {"merge bad form",
       [](json& j) {
         j["model"]["merges"][1] = {1, 2};
       },
       kDL, "'model.merges[1]'"},
      {"merge unknown token", [](json& j) { j["model"]["merges"][0] = "x yz"; }, kDL, "merge 0"},
      {"vocab hole", [](json& j) { j["model"]["vocab"].erase("ll"); }, kDL, "id 259 has no token"},
      {"vocab dup id", [](json& j) { j["model"]["vocab"]["zz"] = 5; }, kDL, "id 5 is given to both"},
      {"vocab id negative", [](json& j) { j["model"]["vocab"]["zz"] = -1; }, kDL, "'model.vocab'"},
      {"no model", [](json& j) { j.erase("model"); }, kDL, "'model': missing"},
      {"unk missing", [](json& j) { j["model"]["unk_token"] = "<unk>"; }, kDL, "'model.unk_token'"},
  };
  for (const Refusal& r : cases) {
    json j = testing::tiny_tokenizer_json();
    r.edit(j);
    auto v = vocab_from_hf_json(j, nullptr, "m/tokenizer.json");
    ASSERT_FALSE(v.ok()) << r.what;
    EXPECT_EQ(v.status().code(), r.code) << r.what << ": " << v.status().to_string();
    EXPECT_NE(v.status().message().find(r.needle), std::string::npos)
        << r.what << ": " << v.status().message();
    EXPECT_EQ(v.status().message().rfind("m/tokenizer.json: ", 0), 0u) << v.status().message();
  }
  json cfg = {{"eos_token", "<|nope|>"}};
  auto v = vocab_from_hf_json(testing::tiny_tokenizer_json(), &cfg);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("'eos_token': token '<|nope|>' is not in the vocabulary"),
            std::string::npos);
}

// The default model's HF export: the same vocabulary as its GGUF, and Hugging
// Face's own ids (parity.json) on the whole corpus.
TEST(HfTokenizer, DefaultModelExportMatchesGgufAndHuggingFace) {
  if (!testing::hf_fixture_present()) GTEST_SKIP() << testing::kHfFixtureHint;
  auto v = vocab_from_hf_folder(testing::hf_fixture_dir());
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  auto hf = Tokenizer::from_vocab(std::move(v).value());
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  const Tokenizer& gguf = testing::default_tokenizer();
  const Tokenizer& t = **hf;
  ASSERT_EQ(t.n_vocab(), gguf.n_vocab());
  EXPECT_EQ(t.vocab().pre, gguf.vocab().pre);
  EXPECT_EQ(t.bos_id(), gguf.bos_id());
  EXPECT_EQ(t.eos_id(), gguf.eos_id());
  EXPECT_EQ(t.add_bos(), gguf.add_bos());
  EXPECT_EQ(t.eos_ids(), gguf.eos_ids());
  EXPECT_EQ(t.chat_template(), gguf.chat_template());
  EXPECT_EQ(t.vocab().merges, gguf.vocab().merges);
  for (int32_t id = 0; id < t.n_vocab(); ++id) {
    ASSERT_EQ(t.token_text(id), gguf.token_text(id)) << id;
    ASSERT_EQ(t.is_special(id), gguf.is_special(id)) << id;
  }
  auto cases = json::parse(testing::read_fixture("parity.json"));
  size_t n = 0;
  for (const auto& e : cases) {
    const std::string text =
        e.contains("hex") ? testing::from_hex(e["hex"].get<std::string>()) : e["text"].get<std::string>();
    EXPECT_EQ(t.encode(text, false, true), e["ids"].get<std::vector<int32_t>>()) << text;
    EXPECT_EQ(t.encode(text, false, false), e["ids_plain"].get<std::vector<int32_t>>()) << text;
    ++n;
  }
  EXPECT_GE(n, 300u);
}

}  // namespace
}  // namespace nanoserve
