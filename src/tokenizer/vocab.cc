#include "tokenizer/vocab.h"

#include <cmath>
#include <string_view>
#include <unordered_set>

#include "io/gguf.h"

namespace nanoserve {

namespace {

std::string quoted(std::string_view s) {
  constexpr size_t kMax = 40;
  std::string out = "'";
  out.append(s.substr(0, kMax));
  if (s.size() > kMax) out += "...";
  return out + "'";
}

Status check_id(int32_t id, int64_t n_vocab, const char* name) {
  if (id < -1 || id >= n_vocab) {
    return data_loss(std::string("tokenizer: ") + name + " " + std::to_string(id) + " out of range [0, " +
                     std::to_string(n_vocab) + ")");
  }
  return Status();
}

}  // namespace

Status validate_vocab(const VocabData& v) {
  const int64_t n = static_cast<int64_t>(v.tokens.size());
  if (v.model != "gpt2" && v.model != "llama") {
    return unimplemented("tokenizer: model '" + v.model.substr(0, 40) + "' is not supported; gpt2, llama");
  }
  if (n == 0) return data_loss("tokenizer: empty token list");
  if (!v.scores.empty() && static_cast<int64_t>(v.scores.size()) != n) {
    return data_loss("tokenizer: scores has " + std::to_string(v.scores.size()) + " entries for " +
                     std::to_string(n) + " tokens");
  }
  if (v.model == "llama" && v.merges.empty() && v.scores.empty()) {
    return data_loss("tokenizer: scores: a llama vocab without merges needs one score per token");
  }
  for (size_t i = 0; i < v.scores.size(); ++i) {
    if (std::isnan(v.scores[i])) return data_loss("tokenizer: scores[" + std::to_string(i) + "] is NaN");
  }
  if (n > kMaxVocabSize) {
    return data_loss("tokenizer: " + std::to_string(n) + " tokens exceed the limit " +
                     std::to_string(kMaxVocabSize));
  }
  if (!v.token_types.empty() && static_cast<int64_t>(v.token_types.size()) != n) {
    return data_loss("tokenizer: token_type has " + std::to_string(v.token_types.size()) + " entries for " +
                     std::to_string(n) + " tokens");
  }
  for (size_t i = 0; i < v.token_types.size(); ++i) {
    int32_t t = static_cast<int32_t>(v.token_types[i]);
    if (t < 0 || t > static_cast<int32_t>(TokenType::kByte)) {
      return data_loss("tokenizer: token_type[" + std::to_string(i) + "] = " + std::to_string(t) +
                       " is not a known type");
    }
  }
  std::unordered_set<std::string_view> seen;
  seen.reserve(v.tokens.size());
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const std::string& t = v.tokens[i];
    if (t.empty()) return data_loss("tokenizer: token " + std::to_string(i) + " is empty");
    if (static_cast<int64_t>(t.size()) > kMaxTokenBytes) {
      return data_loss("tokenizer: token " + std::to_string(i) + " is " + std::to_string(t.size()) +
                       " bytes, over the limit " + std::to_string(kMaxTokenBytes));
    }
    seen.insert(t);  // duplicates are allowed (the first id wins), as in HF and llama.cpp
  }
  NS_RETURN_IF_ERROR(check_id(v.bos_id, n, "bos_token_id"));
  NS_RETURN_IF_ERROR(check_id(v.eos_id, n, "eos_token_id"));
  NS_RETURN_IF_ERROR(check_id(v.pad_id, n, "padding_token_id"));
  NS_RETURN_IF_ERROR(check_id(v.unk_id, n, "unknown_token_id"));
  NS_RETURN_IF_ERROR(check_id(v.eot_id, n, "eot_token_id"));
  for (int32_t id : v.extra_eos_ids) NS_RETURN_IF_ERROR(check_id(id, n, "eos_token_id"));
  if (static_cast<int64_t>(v.merges.size()) > kMaxMerges) {
    return data_loss("tokenizer: " + std::to_string(v.merges.size()) + " merges exceed the limit " +
                     std::to_string(kMaxMerges));
  }
  std::string joined;
  for (size_t i = 0; i < v.merges.size(); ++i) {
    std::string_view m = v.merges[i];
    size_t sp = m.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp + 1 >= m.size() ||
        m.find(' ', sp + 1) != std::string_view::npos) {
      return data_loss("tokenizer: merge " + std::to_string(i) + " " + quoted(m) +
                       " is not two tokens separated by one space");
    }
    std::string_view left = m.substr(0, sp), right = m.substr(sp + 1);
    if (!seen.count(left) || !seen.count(right)) {
      return data_loss("tokenizer: merge " + std::to_string(i) + " " + quoted(m) +
                       " names a token not in the vocab");
    }
    joined.assign(left);
    joined.append(right);
    if (!seen.count(joined)) {
      return data_loss("tokenizer: merge " + std::to_string(i) + " " + quoted(m) + " makes " +
                       quoted(joined) + ", which is not in the vocab");
    }
  }
  return Status();
}

namespace {

StatusOr<std::vector<std::string>> read_string_array(const GgufFile& f, std::string_view key, bool required) {
  std::vector<std::string> out;
  if (!required && f.find(key) == nullptr) return out;
  auto arr = f.get_array(key);
  if (!arr.ok()) return data_loss("tokenizer: " + std::string(key) + ": " + arr.status().message());
  out.reserve((*arr)->items.size());
  for (size_t i = 0; i < (*arr)->items.size(); ++i) {
    const std::string* s = (*arr)->items[i].as_string();
    if (s == nullptr)
      return data_loss("tokenizer: " + std::string(key) + "[" + std::to_string(i) + "] is not a string");
    out.push_back(*s);
  }
  return out;
}

Status read_optional_id(const GgufFile& f, std::string_view key, int32_t* out) {
  if (f.find(key) == nullptr) return Status();
  auto v = f.get_int(key);
  if (!v.ok()) return data_loss("tokenizer: " + std::string(key) + ": " + v.status().message());
  if (*v < 0 || *v > INT32_MAX)
    return data_loss("tokenizer: " + std::string(key) + " = " + std::to_string(*v) + " out of range");
  *out = static_cast<int32_t>(*v);
  return Status();
}

Status read_optional_bool(const GgufFile& f, std::string_view key, bool* out) {
  if (f.find(key) == nullptr) return Status();
  auto v = f.get_bool(key);
  if (!v.ok()) return data_loss("tokenizer: " + std::string(key) + ": " + v.status().message());
  *out = *v;
  return Status();
}

}  // namespace

StatusOr<VocabData> vocab_from_gguf(const GgufFile& f) {
  VocabData v;
  auto model = f.get_string("tokenizer.ggml.model");
  if (!model.ok()) return data_loss("tokenizer: tokenizer.ggml.model: " + model.status().message());
  v.model = *model;
  if (v.model != "gpt2" && v.model != "llama") {
    const char* kind = v.model == "t5"     ? " (SentencePiece unigram)"
                       : v.model == "bert" ? " (WordPiece)"
                       : v.model == "rwkv" ? " (RWKV trie)"
                                           : "";
    return unimplemented("tokenizer: tokenizer.ggml.model '" + v.model.substr(0, 40) + "'" + kind +
                         " is not supported; only byte-level BPE ('gpt2') and SentencePiece BPE ('llama')");
  }
  const bool spm = v.model == "llama";
  if (f.find("tokenizer.ggml.pre") != nullptr) {
    auto pre = f.get_string("tokenizer.ggml.pre");
    if (!pre.ok()) return data_loss("tokenizer: tokenizer.ggml.pre: " + pre.status().message());
    v.pre = *pre;
  } else {
    v.pre = "default";
  }
  NS_ASSIGN_OR_RETURN(v.tokens, read_string_array(f, "tokenizer.ggml.tokens", /*required=*/true));
  // A llama vocab merges by score, as llama.cpp does; merges a converter may have written are unused.
  if (!spm) {
    NS_ASSIGN_OR_RETURN(v.merges, read_string_array(f, "tokenizer.ggml.merges", /*required=*/true));
  } else {
    auto arr = f.get_array("tokenizer.ggml.scores");
    if (!arr.ok()) return data_loss("tokenizer: tokenizer.ggml.scores: " + arr.status().message());
    v.scores.reserve((*arr)->items.size());
    for (size_t i = 0; i < (*arr)->items.size(); ++i) {
      auto x = (*arr)->items[i].as_float();
      if (!x) return data_loss("tokenizer: tokenizer.ggml.scores[" + std::to_string(i) + "] is not a number");
      v.scores.push_back(static_cast<float>(*x));
    }
    bool add_space_prefix = true;
    NS_RETURN_IF_ERROR(read_optional_bool(f, "tokenizer.ggml.add_space_prefix", &add_space_prefix));
    v.space_prefix = add_space_prefix ? SpacePrefix::kAlways : SpacePrefix::kNone;
    v.decode_strip_space = add_space_prefix;
  }
  if (f.find("tokenizer.ggml.token_type") != nullptr) {
    auto arr = f.get_array("tokenizer.ggml.token_type");
    if (!arr.ok()) return data_loss("tokenizer: tokenizer.ggml.token_type: " + arr.status().message());
    v.token_types.reserve((*arr)->items.size());
    for (size_t i = 0; i < (*arr)->items.size(); ++i) {
      auto t = (*arr)->items[i].as_int();
      if (!t || *t < 0 || *t > static_cast<int64_t>(TokenType::kByte)) {
        return data_loss("tokenizer: tokenizer.ggml.token_type[" + std::to_string(i) +
                         "] is not a token type");
      }
      v.token_types.push_back(static_cast<TokenType>(*t));
    }
  }
  NS_RETURN_IF_ERROR(read_optional_id(f, "tokenizer.ggml.bos_token_id", &v.bos_id));
  NS_RETURN_IF_ERROR(read_optional_id(f, "tokenizer.ggml.eos_token_id", &v.eos_id));
  NS_RETURN_IF_ERROR(read_optional_id(f, "tokenizer.ggml.padding_token_id", &v.pad_id));
  NS_RETURN_IF_ERROR(read_optional_id(f, "tokenizer.ggml.unknown_token_id", &v.unk_id));
  NS_RETURN_IF_ERROR(read_optional_id(f, "tokenizer.ggml.eot_token_id", &v.eot_id));
  NS_RETURN_IF_ERROR(read_optional_bool(f, "tokenizer.ggml.add_bos_token", &v.add_bos));
  NS_RETURN_IF_ERROR(read_optional_bool(f, "tokenizer.ggml.add_eos_token", &v.add_eos));
  if (f.find("tokenizer.chat_template") != nullptr) {
    auto t = f.get_string("tokenizer.chat_template");
    if (!t.ok()) return data_loss("tokenizer: tokenizer.chat_template: " + t.status().message());
    v.chat_template = *t;
  }
  NS_RETURN_IF_ERROR(validate_vocab(v));
  return v;
}

}  // namespace nanoserve
