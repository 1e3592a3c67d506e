// tokenizer.json pipelines as the Hugging Face `tokenizers` library writes
// them, against the library's own ids and text (tests/fixtures/tokenizer/
// pipelines/, made by make_pipeline_fixtures.py):
//   - each family's published pipeline and the variants libraries write of it,
//     through the fast path where the loader takes one AND through the
//     component pipeline (the two must agree with the library, so with each other);
//   - at least 200 pipelines composed at random from every supported
//     component, over a small trained vocabulary, through the component
//     pipeline, compared by per-case digests of the library's results.
// Each case is encoded with special tokens parsed and as plain text, both
// decoded (plain ids; the parsed ids skipping special tokens), and the first
// cases once more with add_special (the post-processor's BOS / EOS).

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>

#include "tokenizer/default_tokenizer.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace nanoserve {
namespace {

using nlohmann::json;

const json& fixture(const std::string& name) {
  static std::map<std::string, json> cache;
  auto it = cache.find(name);
  if (it == cache.end())
    it = cache.emplace(name, json::parse(testing::read_fixture("pipelines/" + name))).first;
  return it->second;
}

const std::vector<std::string>& texts() {
  static const std::vector<std::string> t = [] {
    std::vector<std::string> out;
    for (const json& c : fixture("cases.json")) {
      // Invalid UTF-8 goes in as bytes; the library was given it decoded with replacement, as encode does.
      out.push_back(c.contains("hex") ? testing::from_hex(c["hex"].get<std::string>())
                                      : c["text"].get<std::string>());
    }
    return out;
  }();
  return t;
}

// The tokenizer.json the library wrote, with the named vocabulary put back.
json assemble(const json& entry) {
  json j = entry["json"];
  const json& vocab = fixture("vocabs.json")[entry["vocab"].get<std::string>()];
  j["model"]["vocab"] = vocab["vocab"];
  j["model"]["merges"] = vocab["merges"];
  return j;
}

std::unique_ptr<Tokenizer> load(const json& j, const std::string& name, HfPath path) {
  auto v = vocab_from_hf_json(j, nullptr, name, path);
  EXPECT_TRUE(v.ok()) << name << ": " << v.status().to_string();
  if (!v.ok()) return nullptr;
  auto t = Tokenizer::from_vocab(std::move(v).value());
  EXPECT_TRUE(t.ok()) << name << ": " << t.status().to_string();
  return t.ok() ? std::move(t).value() : nullptr;
}

std::string show(const std::string& s) {
  return json(utf8::sanitize(s)).dump();
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) s.push_back(' ');
    s.append(std::to_string(ids[i]));
  }
  return s;
}

// What one tokenizer makes of case i, serialized as make_pipeline_fixtures.py's digest() does.
struct Result {
  std::vector<int32_t> ids, ids_plain;
  std::string decoded, decoded_skip;
  std::string serial(int check) const {
    switch (check) {
      case 0: return ids_text(ids);
      case 1: return ids_text(ids_plain);
      case 2: return decoded;
      default: return decoded_skip;
    }
  }
};

Result run(const Tokenizer& tok, const std::string& text) {
  Result r;
  r.ids = tok.encode(text, /*add_special=*/false, /*parse_special=*/true);
  r.ids_plain = tok.encode(text, false, /*parse_special=*/false);
  r.decoded = tok.decode(r.ids_plain);
  r.decoded_skip = tok.decode(r.ids, /*skip_special=*/true);
  return r;
}

uint32_t fnv1a(uint32_t h, std::string_view data) {
  for (char c : data) h = (h ^ static_cast<uint8_t>(c)) * 0x01000193u;
  return h;
}
constexpr uint32_t kFnvBasis = 0x811C9DC5u;

std::string hex8(uint32_t h) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", h);
  return buf;
}

constexpr const char* kChecks[4] = {"ids", "ids_plain", "decoded", "decoded_skip"};

class FamilyParity : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilyParity, FastPathAndComponentPipelineMatchTheLibrary) {
  const std::string name = GetParam();
  const json& e = fixture("families.json")[name];
  ASSERT_FALSE(e.is_null()) << name;
  const json j = assemble(e);
  for (HfPath path : {HfPath::kFastest, HfPath::kPipeline}) {
    auto tok = load(j, name, path);
    ASSERT_TRUE(tok);
    const char* how = path == HfPath::kFastest
                          ? (tok->vocab().hf_pipeline ? "components (no fast path)" : "fast path")
                          : "components";
    size_t same = 0, total = 0;
    for (size_t i = 0; i < texts().size(); ++i) {
      const Result r = run(*tok, texts()[i]);
      const auto want_ids = e["ids"][i].get<std::vector<int32_t>>();
      const auto want_plain = e["ids_plain"][i].get<std::vector<int32_t>>();
      EXPECT_EQ(r.ids, want_ids) << name << " (" << how << ") " << show(texts()[i]);
      EXPECT_EQ(r.ids_plain, want_plain) << name << " (" << how << ") plain " << show(texts()[i]);
      EXPECT_EQ(r.decoded, e["decoded"][i].get<std::string>())
          << name << " (" << how << ") decode " << show(texts()[i]);
      EXPECT_EQ(r.decoded_skip, e["decoded_skip"][i].get<std::string>())
          << name << " (" << how << ") decode skip " << show(texts()[i]);
      same += r.ids == want_ids && r.ids_plain == want_plain && r.decoded == e["decoded"][i] &&
              r.decoded_skip == e["decoded_skip"][i];
      ++total;
      if (i < e["with_bos"].size()) {
        EXPECT_EQ(tok->encode(texts()[i], /*add_special=*/true, true),
                  e["with_bos"][i].get<std::vector<int32_t>>())
            << name << " (" << how << ") with BOS " << show(texts()[i]);
      }
    }
    std::printf("[ parity   ] %-40s %-26s %zu/%zu cases\n", name.c_str(), how, same, total);
  }
}

// The fast paths must be taken where they exist, or FastPathAndComponentPipelineMatchTheLibrary
// holds the component pipeline twice and the fast path not at all.
TEST(FamilyParity, KnownFamiliesTakeTheirFastPath) {
  for (const char* name :
       {"llama3", "llama3_norm_empty_seq", "llama3_no_normalizer_key", "qwen2", "qwen2_nfc_seq_of_one",
        "qwen2_nested_seq", "gpt2", "gpt2_pre_seq_of_one", "gpt2_no_optional_keys", "smollm2",
        "smollm2_norm_empty_seq", "llama2_legacy", "mistral_v03_legacy_no_pre_key", "phi3",
        "llama2_metaspace_first", "llama2_metaspace_first_norm_empty_seq", "metaspace_always_split",
        "metaspace_never"}) {
    auto tok = load(assemble(fixture("families.json")[name]), name, HfPath::kFastest);
    ASSERT_TRUE(tok);
    EXPECT_EQ(tok->vocab().hf_pipeline, nullptr) << name << " should take a fast path";
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyParity,
                         ::testing::Values("llama3", "llama3_norm_empty_seq", "llama3_no_normalizer_key",
                                           "llama3_byte_level_regex_on", "qwen2", "qwen2_nfc_seq_of_one",
                                           "qwen2_nested_seq", "gpt2", "gpt2_regex_off", "gpt2_prefix_space",
                                           "gpt2_pre_seq_of_one", "gpt2_no_optional_keys", "smollm2",
                                           "smollm2_norm_empty_seq", "smollm2_gguf_conversion_shape",
                                           "llama2_legacy", "mistral_v03_legacy_no_pre_key", "phi3",
                                           "llama2_metaspace_first", "llama2_metaspace_first_norm_empty_seq",
                                           "mistral_v03_metaspace_decoder", "metaspace_always_split",
                                           "metaspace_never"));

TEST(RandomPipelineParity, EveryPipelineMatchesTheLibraryOnEveryCase) {
  const json& pipelines = fixture("random.json")["pipelines"];
  ASSERT_GE(pipelines.size(), 200u);
  ASSERT_GE(texts().size(), 150u);
  size_t pipelines_same = 0, cases_same = 0, cases_total = 0;
  for (size_t p = 0; p < pipelines.size(); ++p) {
    const json& e = pipelines[p];
    std::string name = "random[";
    name.append(std::to_string(p)).push_back(']');
    auto tok = load(assemble(e), name, HfPath::kPipeline);
    ASSERT_TRUE(tok) << name;
    uint32_t check_hash[4] = {kFnvBasis, kFnvBasis, kFnvBasis, kFnvBasis};
    std::vector<size_t> bad_cases;
    for (size_t i = 0; i < texts().size(); ++i) {
      const Result r = run(*tok, texts()[i]);
      uint32_t case_hash = kFnvBasis;
      for (int c = 0; c < 4; ++c) {
        const std::string s = r.serial(c);
        check_hash[c] = fnv1a(fnv1a(check_hash[c], s), std::string_view("\0", 1));
        case_hash = fnv1a(fnv1a(case_hash, s), std::string_view("\0", 1));
      }
      const bool ok = hex8(case_hash) == e["digest"]["cases"][i].get<std::string>();
      if (!ok) bad_cases.push_back(i);
      cases_same += ok;
      ++cases_total;
      if (i < e["with_bos"].size()) {
        EXPECT_EQ(tok->encode(texts()[i], true, true), e["with_bos"][i].get<std::vector<int32_t>>())
            << name << " with BOS " << show(texts()[i]) << "\n"
            << e["json"].dump();
      }
    }
    std::string bad_checks;
    for (int c = 0; c < 4; ++c) {
      if (hex8(check_hash[c]) != e["digest"]["checks"][kChecks[c]].get<std::string>()) {
        if (!bad_checks.empty()) bad_checks.append(", ");
        bad_checks.append(kChecks[c]);
      }
    }
    EXPECT_TRUE(bad_cases.empty() && bad_checks.empty())
        << name << ": " << bad_cases.size() << " of " << texts().size() << " cases differ from the library ("
        << bad_checks << "), first " << (bad_cases.empty() ? "-" : show(texts()[bad_cases[0]])) << " -> ids "
        << (bad_cases.empty() ? "" : ids_text(run(*tok, texts()[bad_cases[0]]).ids)) << "\npipeline "
        << e["json"].dump();
    pipelines_same += bad_cases.empty() && bad_checks.empty();
  }
  std::printf("[ parity   ] random pipelines: %zu/%zu pipelines, %zu/%zu pipeline x case pairs equal\n",
              pipelines_same, pipelines.size(), cases_same, cases_total);
}

}  // namespace
}  // namespace nanoserve
