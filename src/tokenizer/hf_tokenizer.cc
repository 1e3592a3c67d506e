#include "tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <limits>

#include "io/json_file.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/hf_pipeline.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/spm.h"

namespace nanoserve {

namespace {

using nlohmann::json;

constexpr uint64_t kMaxTokenizerBytes = uint64_t{256} << 20;
constexpr uint64_t kMaxConfigBytes = uint64_t{16} << 20;

// The Split regexes of the Llama-3 and Qwen2 tokenizer.json files.
constexpr const char* kLlama3Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

class Ctx {
 public:
  explicit Ctx(const std::string& name) : name_(name) {}
  Status bad(const std::string& field, const std::string& what) const {
    return data_loss(name_ + ": '" + field + "': " + what);
  }
  Status unsupported(const std::string& field, const std::string& what) const {
    return unimplemented(name_ + ": '" + field + "': " + what);
  }
  const std::string& name() const { return name_; }

 private:
  const std::string& name_;
};

std::string type_of(const json& j) {
  auto t = j.find("type");
  return t != j.end() && t->is_string() ? t->get<std::string>() : std::string("?");
}

bool flag(const json& j, const char* key, bool dflt) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : dflt;
}

Status check_byte_level(const Ctx& c, const json& bl, const std::string& field, bool want_regex) {
  if (flag(bl, "add_prefix_space", false)) {
    return c.unsupported(field + ".add_prefix_space", "true is not supported");
  }
  if (flag(bl, "use_regex", true) != want_regex) {
    return c.unsupported(field + ".use_regex",
                         want_regex ? "must be true here" : "must be false after a Split");
  }
  return Status::ok_status();
}

// The PreTokenizer name for a pre_tokenizer object.
StatusOr<std::string> pre_tokenizer_name(const Ctx& c, const json& pre) {
  if (pre.is_null()) return c.unsupported("pre_tokenizer", "null (no byte-level split) is not supported");
  if (!pre.is_object()) return c.bad("pre_tokenizer", "not an object");
  const std::string type = type_of(pre);
  if (type == "ByteLevel") {
    NS_RETURN_IF_ERROR(check_byte_level(c, pre, "pre_tokenizer", true));
    return std::string("gpt2");
  }
  if (type != "Sequence") {
    return c.unsupported("pre_tokenizer.type", "'" + type.substr(0, 40) + "' is not supported");
  }
  auto items = pre.find("pretokenizers");
  if (items == pre.end() || !items->is_array()) return c.bad("pre_tokenizer.pretokenizers", "not a list");
  std::string types;
  for (const json& p : *items) types += (types.empty() ? "" : ", ") + (p.is_object() ? type_of(p) : "?");
  const std::string shape = "Sequence[" + types.substr(0, 80) + "] is not a supported pre-tokenizer";
  if (items->size() != 2 || !(*items)[0].is_object() || !(*items)[1].is_object()) {
    return c.unsupported("pre_tokenizer", shape);
  }
  const json& first = (*items)[0];
  const json& second = (*items)[1];
  if (type_of(second) != "ByteLevel") return c.unsupported("pre_tokenizer", shape);
  if (type_of(first) == "Digits") {
    if (!flag(first, "individual_digits", false)) {
      return c.unsupported("pre_tokenizer.pretokenizers[0].individual_digits", "false is not supported");
    }
    NS_RETURN_IF_ERROR(check_byte_level(c, second, "pre_tokenizer.pretokenizers[1]", true));
    return std::string("smollm");
  }
  if (type_of(first) == "Split") {
    auto pat = first.find("pattern");
    const json* regex = nullptr;
    if (pat != first.end() && pat->is_object() && pat->contains("Regex") && (*pat)["Regex"].is_string()) {
      regex = &(*pat)["Regex"];
    }
    if (regex == nullptr) return c.unsupported("pre_tokenizer.pretokenizers[0].pattern", "not a Regex");
    auto behavior = first.find("behavior");
    if (behavior == first.end() || !behavior->is_string() || behavior->get<std::string>() != "Isolated" ||
        flag(first, "invert", false)) {
      return c.unsupported("pre_tokenizer.pretokenizers[0].behavior", "only Isolated, not inverted");
    }
    NS_RETURN_IF_ERROR(check_byte_level(c, second, "pre_tokenizer.pretokenizers[1]", false));
    const std::string& r = regex->get_ref<const std::string&>();
    if (r == kLlama3Split) return std::string("llama-bpe");
    if (r == kQwen2Split) return std::string("qwen2");
    return c.unsupported("pre_tokenizer.pretokenizers[0].pattern",
                         "the regex '" + r.substr(0, 60) + "...' is not one of the known ones");
  }
  return c.unsupported("pre_tokenizer", shape);
}

bool is_string_pattern(const json& j, const char* key, std::string_view want) {
  auto p = j.find(key);
  return p != j.end() && p->is_object() && p->contains("String") && (*p)["String"].is_string() &&
         (*p)["String"].get_ref<const std::string&>() == want;
}

bool string_is(const json& j, const char* key, std::string_view want) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() && it->get_ref<const std::string&>() == want;
}

constexpr std::string_view kMeta = "\xE2\x96\x81";  // U+2581

// The SentencePiece-style pipeline (Llama-2, Mistral, TinyLlama, Phi-3):
//   normalizer     Sequence[Prepend("▁"), Replace(" ", "▁")] or Sequence[Replace(" ", "▁")], with
//                  pre_tokenizer null; or null, with pre_tokenizer Metaspace("▁", prepend_scheme, split)
//   decoder        Sequence[Replace("▁", " "), ByteFallback, Fuse] and optionally Strip(" ", 1, 0)
Status read_spm_pipeline(const Ctx& c, const json& j, VocabData* v) {
  v->model = "llama";
  v->pre = "spm";
  auto dec = j.find("decoder");
  const std::string want = "Sequence[Replace(\"\u2581\", \" \"), ByteFallback, Fuse, Strip(\" \", 1, 0)]";
  if (dec == j.end() || !dec->is_object() || type_of(*dec) != "Sequence") {
    return c.unsupported("decoder", "'" + (dec != j.end() && dec->is_object() ? type_of(*dec) : "null") +
                                        "' is not supported; " + want + " is");
  }
  auto list = dec->find("decoders");
  if (list == dec->end() || !list->is_array()) return c.bad("decoder.decoders", "not a list");
  v->decode_strip_space = false;
  for (size_t i = 0; i < list->size(); ++i) {
    const json& x = (*list)[i];
    const std::string field = "decoder.decoders[" + std::to_string(i) + "]";
    const std::string t = x.is_object() ? type_of(x) : "?";
    bool ok = false;
    if (i == 0) ok = t == "Replace" && is_string_pattern(x, "pattern", kMeta) && string_is(x, "content", " ");
    if (i == 1) ok = t == "ByteFallback";
    if (i == 2) ok = t == "Fuse";
    if (i == 3 && t == "Strip" && string_is(x, "content", " ")) {
      auto start = x.find("start"), stop = x.find("stop");
      ok = start != x.end() && start->is_number_integer() && start->get<int64_t>() <= 1 && stop != x.end() &&
           stop->is_number_integer() && stop->get<int64_t>() == 0;
      v->decode_strip_space = ok && start->get<int64_t>() == 1;
    }
    if (!ok) return c.unsupported(field, "'" + t.substr(0, 40) + "' is not supported here; " + want + " is");
  }
  if (list->size() < 3) return c.unsupported("decoder.decoders", "expected " + want);
  v->space_prefix = SpacePrefix::kNone;
  v->split_on_space = false;
  const json* norm = nullptr;
  if (auto n = j.find("normalizer"); n != j.end() && !n->is_null()) norm = &*n;
  const json* pre = nullptr;
  if (auto p = j.find("pre_tokenizer"); p != j.end() && !p->is_null()) pre = &*p;
  if (norm != nullptr) {
    if (!norm->is_object()) return c.bad("normalizer", "not an object");
    std::vector<const json*> items;
    if (type_of(*norm) == "Sequence") {
      auto list = norm->find("normalizers");
      if (list == norm->end() || !list->is_array()) return c.bad("normalizer.normalizers", "not a list");
      for (const json& x : *list) items.push_back(&x);
    } else {
      items.push_back(norm);
    }
    bool replaced = false;
    for (size_t i = 0; i < items.size(); ++i) {
      const json& x = *items[i];
      const std::string field = type_of(*norm) == "Sequence"
                                    ? "normalizer.normalizers[" + std::to_string(i) + "]"
                                    : std::string("normalizer");
      const std::string t = x.is_object() ? type_of(x) : "?";
      if (t == "Prepend" && i == 0 && string_is(x, "prepend", kMeta)) {
        v->space_prefix = SpacePrefix::kAlways;
      } else if (t == "Replace" && !replaced && is_string_pattern(x, "pattern", " ") &&
                 string_is(x, "content", kMeta)) {
        replaced = true;
      } else {
        return c.unsupported(field, "'" + t.substr(0, 40) +
                                        "' is not supported here (Prepend(\"\u2581\") then " +
                                        "Replace(\" \", \"\u2581\") are)");
      }
    }
    if (!replaced)
      return c.unsupported("normalizer", "a SentencePiece-style vocab needs Replace(\" \", \"\u2581\")");
    if (pre != nullptr) {
      return c.unsupported("pre_tokenizer", "'" + (pre->is_object() ? type_of(*pre) : "?").substr(0, 40) +
                                                "' after a normalizer is not supported");
    }
  } else {
    if (pre == nullptr || !pre->is_object() || type_of(*pre) != "Metaspace") {
      return c.unsupported("pre_tokenizer", "'" + (pre && pre->is_object() ? type_of(*pre) : "null") +
                                                "' is not supported with this decoder (Metaspace is)");
    }
    if (!string_is(*pre, "replacement", kMeta)) {
      return c.unsupported("pre_tokenizer.replacement", "only \"\u2581\" is supported");
    }
    std::string scheme = flag(*pre, "add_prefix_space", true) ? "always" : "never";  // the older form
    if (auto ps = pre->find("prepend_scheme"); ps != pre->end() && !ps->is_null()) {
      if (!ps->is_string()) return c.bad("pre_tokenizer.prepend_scheme", "not a string");
      scheme = ps->get<std::string>();
    }
    if (scheme == "always") {
      v->space_prefix = SpacePrefix::kMetaspaceAlways;
    } else if (scheme == "first") {
      v->space_prefix = SpacePrefix::kMetaspaceFirst;
    } else if (scheme != "never") {
      return c.unsupported("pre_tokenizer.prepend_scheme", "'" + scheme.substr(0, 40) + "' is not known");
    }
    v->split_on_space = flag(*pre, "split", true);
  }

  // <0xXX> tokens are bytes (HF's ByteFallback decoder reads any token of that form).
  if (v->token_types.empty()) v->token_types.assign(v->tokens.size(), TokenType::kNormal);
  for (size_t i = 0; i < v->tokens.size(); ++i) {
    if (v->token_types[i] == TokenType::kNormal && SpmModel::parse_byte_token(v->tokens[i]) >= 0) {
      v->token_types[i] = TokenType::kByte;
    }
  }
  return Status::ok_status();
}

// The special tokens a TemplateProcessing's single template puts before and after $A: at most one
// id on each side, which become BOS and EOS.
Status read_template(const Ctx& c, const json& tp, const std::string& path, VocabData* v) {
  auto single = tp.find("single");
  if (single == tp.end() || !single->is_array() || single->empty()) {
    return c.bad(path + ".single", "missing or empty");
  }
  auto specials = tp.find("special_tokens");
  std::vector<int32_t> before, after;
  bool seen_a = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const json& piece = (*single)[i];
    const std::string field = path + ".single[" + std::to_string(i) + "]";
    if (piece.is_object() && piece.contains("Sequence")) {
      const json& sq = piece["Sequence"];
      if (!sq.is_object() || sq.value("id", "") != "A" || seen_a) {
        return c.bad(field, "the single template holds the sequence $A once");
      }
      seen_a = true;
      continue;
    }
    if (!piece.is_object() || !piece.contains("SpecialToken") || !piece["SpecialToken"].is_object() ||
        !piece["SpecialToken"].contains("id") || !piece["SpecialToken"]["id"].is_string()) {
      return c.bad(field, "expected {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": ...}");
    }
    const std::string& name = piece["SpecialToken"]["id"].get_ref<const std::string&>();
    if (specials == tp.end() || !specials->is_object() || !specials->contains(name) ||
        !(*specials)[name].is_object() || !(*specials)[name].contains("ids") ||
        !(*specials)[name]["ids"].is_array()) {
      return c.bad(path + ".special_tokens", "'" + name.substr(0, 40) + "' is missing");
    }
    for (const json& id : (*specials)[name]["ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxVocabSize) {
        return c.bad(path + ".special_tokens." + name.substr(0, 40) + ".ids", "not a token id");
      }
      (seen_a ? after : before).push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  if (!seen_a) return c.bad(path + ".single", "no $A");
  if (before.size() > 1 || after.size() > 1) {
    return c.unsupported(path + ".single", "more than one special token before or after $A is not supported");
  }
  if (!before.empty()) {
    v->add_bos = true;
    v->bos_id = before[0];
  }
  if (!after.empty()) {
    v->add_eos = true;
    v->eos_id = after[0];
  }
  return Status::ok_status();
}

// RobertaProcessing and BertProcessing: cls $A sep.
Status read_cls_sep(const Ctx& c, const json& pp, const std::string& path, VocabData* v) {
  int32_t ids[2];
  const char* keys[2] = {"cls", "sep"};
  for (int k = 0; k < 2; ++k) {
    auto it = pp.find(keys[k]);
    if (it == pp.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer() ||
        (*it)[1].get<int64_t>() < 0 || (*it)[1].get<int64_t>() >= kMaxVocabSize) {
      return c.bad(path + "." + keys[k], "expected [token, id]");
    }
    ids[k] = static_cast<int32_t>((*it)[1].get<int64_t>());
  }
  v->add_bos = true;
  v->bos_id = ids[0];
  v->add_eos = true;
  v->eos_id = ids[1];
  return Status::ok_status();
}

constexpr const char* kPostProcessorTypes =
    "Sequence, TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing";

Status read_post_processor(const Ctx& c, const json& pp, const std::string& path, VocabData* v) {
  if (pp.is_null()) return Status::ok_status();
  if (!pp.is_object()) return c.bad(path, "not an object");
  const std::string type = type_of(pp);
  if (type == "ByteLevel") return Status::ok_status();  // offsets only; the ids are unchanged
  if (type == "TemplateProcessing") return read_template(c, pp, path, v);
  if (type == "RobertaProcessing" || type == "BertProcessing") return read_cls_sep(c, pp, path, v);
  if (type == "Sequence") {
    auto items = pp.find("processors");
    if (items == pp.end() || !items->is_array()) return c.bad(path + ".processors", "not a list");
    for (size_t i = 0; i < items->size(); ++i) {
      NS_RETURN_IF_ERROR(
          read_post_processor(c, (*items)[i], path + ".processors[" + std::to_string(i) + "]", v));
    }
    return Status::ok_status();
  }
  return c.unsupported(path,
                       "'" + type.substr(0, 40) + "' is not supported (" + kPostProcessorTypes + " are)");
}

Status read_model(const Ctx& c, const json& m, VocabData* v, std::string* unk, bool* ignore_merges) {
  if (!m.is_object()) return c.bad("model", "not an object");
  const std::string type = type_of(m);
  if (type != "BPE") {
    return c.unsupported("model", "'" + type.substr(0, 40) + "' is not supported (BPE is)");
  }
  if (auto d = m.find("dropout");
      d != m.end() && !d->is_null() && !(d->is_number() && d->get<double>() == 0.0)) {
    return c.unsupported("model.dropout", "BPE dropout is not supported");
  }
  v->byte_fallback = flag(m, "byte_fallback", false);
  v->fuse_unk = flag(m, "fuse_unk", false);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = m.find(key);
    if (it != m.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty())) {
      return c.unsupported(std::string("model.") + key, "is not supported");
    }
  }
  *ignore_merges = flag(m, "ignore_merges", false);
  if (auto u = m.find("unk_token"); u != m.end() && !u->is_null()) {
    if (!u->is_string()) return c.bad("model.unk_token", "not a string");
    *unk = u->get<std::string>();
  }

  auto vocab = m.find("vocab");
  if (vocab == m.end() || !vocab->is_object()) return c.bad("model.vocab", "missing or not an object");
  if (static_cast<int64_t>(vocab->size()) > kMaxVocabSize) {
    return c.bad("model.vocab", std::to_string(vocab->size()) + " tokens exceed the limit");
  }
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() >= kMaxVocabSize) {
      return c.bad("model.vocab", "token '" + it.key().substr(0, 40) + "': id is not in [0, " +
                                      std::to_string(kMaxVocabSize) + ")");
    }
    const auto id = static_cast<size_t>(it.value().get<int64_t>());
    if (id >= v->tokens.size()) v->tokens.resize(id + 1);
    if (!v->tokens[id].empty()) {
      return c.bad("model.vocab", "id " + std::to_string(id) + " is given to both '" +
                                      v->tokens[id].substr(0, 40) + "' and '" + it.key().substr(0, 40) + "'");
    }
    v->tokens[id] = it.key();
  }

  auto merges = m.find("merges");
  if (merges == m.end() || !merges->is_array()) return c.bad("model.merges", "missing or not a list");
  if (static_cast<int64_t>(merges->size()) > kMaxMerges) return c.bad("model.merges", "too many merges");
  v->merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& mg = (*merges)[i];
    const std::string field = "model.merges[" + std::to_string(i) + "]";
    if (mg.is_string()) {
      v->merges.push_back(mg.get<std::string>());  // "a b"; validate_vocab checks the form
    } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
      const std::string& a = mg[0].get_ref<const std::string&>();
      const std::string& b = mg[1].get_ref<const std::string&>();
      if (a.find(' ') != std::string::npos || b.find(' ') != std::string::npos) {
        return c.unsupported(field, "a merge of tokens that contain a space is not supported");
      }
      v->merges.push_back(a + " " + b);
    } else {
      return c.bad(field, "expected \"a b\" or [\"a\", \"b\"]");
    }
  }
  return Status::ok_status();
}

Status read_added_tokens(const Ctx& c, const json& j, VocabData* v) {
  auto added = j.find("added_tokens");
  if (added == j.end() || added->is_null()) return Status::ok_status();
  if (!added->is_array()) return c.bad("added_tokens", "not a list");
  std::vector<TokenType> types(v->tokens.size(), TokenType::kNormal);
  for (size_t i = 0; i < added->size(); ++i) {
    const json& t = (*added)[i];
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
        !t["content"].is_string()) {
      return c.bad(field, "expected {id, content, ...}");
    }
    const int64_t id = t["id"].get<int64_t>();
    if (id < 0 || id >= kMaxVocabSize) return c.bad(field + ".id", std::to_string(id) + " is out of range");
    const std::string& content = t["content"].get_ref<const std::string&>();
    if (content.empty()) return c.bad(field + ".content", "empty");
    if (flag(t, "single_word", false)) return c.unsupported(field + ".single_word", "true is not supported");
    if (flag(t, "lstrip", false)) v->lstrip_ids.push_back(static_cast<int32_t>(id));
    if (flag(t, "rstrip", false)) v->rstrip_ids.push_back(static_cast<int32_t>(id));
    const auto uid = static_cast<size_t>(id);
    if (uid >= v->tokens.size()) {
      v->tokens.resize(uid + 1);
      types.resize(uid + 1, TokenType::kNormal);
    }
    if (!v->tokens[uid].empty() && v->tokens[uid] != content) {
      return c.bad(field, "id " + std::to_string(id) + " is '" + v->tokens[uid].substr(0, 40) +
                              "' in model.vocab but '" + content.substr(0, 40) + "' here");
    }
    v->tokens[uid] = content;
    types[uid] = flag(t, "special", false) ? TokenType::kControl : TokenType::kUserDefined;
  }
  v->token_types = std::move(types);
  return Status::ok_status();
}

// A token given as "text" or as {"content": "text", ...}; empty if absent.
StatusOr<std::string> token_text(const Ctx& c, const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return c.bad(key, "expected a token string or {\"content\": ...}");
}

Status read_tokenizer_config(const Ctx& c, const json& cfg, VocabData* v) {
  if (!cfg.is_object()) return c.bad("tokenizer_config", "not an object");
  auto id_of = [&](const char* key, int32_t* out) -> Status {
    NS_ASSIGN_OR_RETURN(std::string text, token_text(c, cfg, key));
    if (text.empty()) return Status::ok_status();
    for (size_t i = 0; i < v->tokens.size(); ++i) {
      if (v->tokens[i] == text) {
        *out = static_cast<int32_t>(i);
        return Status::ok_status();
      }
    }
    return c.bad(key, "token '" + text.substr(0, 40) + "' is not in the vocabulary");
  };
  NS_RETURN_IF_ERROR(id_of("bos_token", &v->bos_id));
  NS_RETURN_IF_ERROR(id_of("eos_token", &v->eos_id));
  NS_RETURN_IF_ERROR(id_of("pad_token", &v->pad_id));
  NS_RETURN_IF_ERROR(id_of("unk_token", &v->unk_id));
  for (auto [key, out] : {std::pair{"add_bos_token", &v->add_bos}, std::pair{"add_eos_token", &v->add_eos}}) {
    auto it = cfg.find(key);
    if (it == cfg.end() || it->is_null()) continue;
    if (!it->is_boolean()) return c.bad(key, "expected true or false");
    *out = it->get<bool>();
  }
  auto tmpl = cfg.find("chat_template");
  if (tmpl != cfg.end() && !tmpl->is_null()) {
    if (tmpl->is_string()) {
      v->chat_template = tmpl->get<std::string>();
    } else if (tmpl->is_array()) {  // [{"name": "default", "template": "..."}, ...]
      for (const json& t : *tmpl) {
        if (t.is_object() && t.value("name", "") == "default" && t.contains("template") &&
            t["template"].is_string()) {
          v->chat_template = t["template"].get<std::string>();
        }
      }
    } else {
      return c.bad("chat_template", "expected a string or a list of named templates");
    }
  }
  return Status::ok_status();
}

}  // namespace

namespace {

// A component with nested Sequences flattened, an empty Sequence as null and a Sequence of one as
// that one: what it does, in the one shape the fast paths below recognise.
json canonical(const json& x, const char* list_key) {
  if (!x.is_object() || type_of(x) != "Sequence") return x;
  auto list = x.find(list_key);
  if (list == x.end() || !list->is_array()) return x;
  json items = json::array();
  for (const json& child : *list) {
    json cc = canonical(child, list_key);
    if (cc.is_null()) continue;
    if (cc.is_object() && type_of(cc) == "Sequence" && cc.contains(list_key)) {
      for (const json& g : cc[list_key]) items.push_back(g);
    } else {
      items.push_back(std::move(cc));
    }
  }
  if (items.empty()) return json();
  if (items.size() == 1) return items[0];
  json out = x;
  out[list_key] = std::move(items);
  return out;
}

// The pipelines with a fast path of their own (the header's list); not OK for anything else.
Status read_fast_path(const Ctx& c, const json& j, bool ignore_merges, VocabData* v) {
  json canon = json::object();
  for (auto [key, list] : {std::pair{"normalizer", "normalizers"},
                           std::pair{"pre_tokenizer", "pretokenizers"}, std::pair{"decoder", "decoders"}}) {
    auto it = j.find(key);
    canon[key] = it == j.end() ? json() : canonical(*it, list);
  }
  const json& dec = canon["decoder"];
  if (dec.is_object() && type_of(dec) == "ByteLevel") {
    if (const json& n = canon["normalizer"]; !n.is_null()) {
      if (!n.is_object() || type_of(n) != "NFC") return c.unsupported("normalizer", "no fast path");
      v->normalize_nfc = true;
    }
    if (v->byte_fallback) return c.unsupported("model.byte_fallback", "no fast path");
    NS_ASSIGN_OR_RETURN(v->pre, pre_tokenizer_name(c, canon["pre_tokenizer"]));
    if (ignore_merges != (v->pre == "llama-bpe")) return c.unsupported("model.ignore_merges", "no fast path");
    if (!v->fuse_unk) {
      // The byte-level model fuses runs of bytes without a token into one unknown token.
      for (int b = 0; b < 256; ++b) {
        std::string ch;
        byte_level::encode(std::string(1, static_cast<char>(b)), ch);
        if (std::find(v->tokens.begin(), v->tokens.end(), ch) == v->tokens.end()) {
          return c.unsupported("model.fuse_unk", "no fast path");
        }
      }
    }
    return Status::ok_status();
  }
  if (ignore_merges) return c.unsupported("model.ignore_merges", "no fast path");
  return read_spm_pipeline(c, canon, v);
}

}  // namespace

StatusOr<VocabData> vocab_from_hf_json(const json& j, const json* cfg, const std::string& name, HfPath path) {
  Ctx c(name);
  if (!j.is_object()) return c.bad("(top level)", "not an object");
  VocabData v;
  v.model = "gpt2";
  auto model = j.find("model");
  if (model == j.end()) return c.bad("model", "missing");
  std::string unk;
  bool ignore_merges = false;
  NS_RETURN_IF_ERROR(read_model(c, *model, &v, &unk, &ignore_merges));
  NS_RETURN_IF_ERROR(read_added_tokens(c, j, &v));
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.tokens[i].empty()) return c.bad("model.vocab", "id " + std::to_string(i) + " has no token");
  }
  // Every component is read here, whichever path runs it, so that what is not supported is refused
  // by its name and path.
  auto pipeline = HfPipeline::parse(j);
  if (!pipeline.ok()) return Status(pipeline.status().code(), name + ": " + pipeline.status().message());
  if (auto pp = j.find("post_processor"); pp != j.end()) {
    NS_RETURN_IF_ERROR(read_post_processor(c, *pp, "post_processor", &v));
  }
  if (!unk.empty()) {
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      if (v.tokens[i] == unk) v.unk_id = static_cast<int32_t>(i);
    }
    if (v.unk_id < 0) return c.bad("model.unk_token", "'" + unk.substr(0, 40) + "' is not in the vocabulary");
  }
  VocabData fast = v;
  if (path == HfPath::kFastest && read_fast_path(c, j, ignore_merges, &fast).ok()) {
    v = std::move(fast);
  } else {
    v.pre = "tokenizer.json";
    v.ignore_merges = ignore_merges;
    v.hf_pipeline = std::move(pipeline).value();
  }
  if (cfg != nullptr) NS_RETURN_IF_ERROR(read_tokenizer_config(c, *cfg, &v));
  Status st = validate_vocab(v);
  if (!st.ok()) return Status(st.code(), name + ": " + st.message());
  return v;
}

StatusOr<VocabData> vocab_from_hf_folder(const std::string& folder) {
  namespace fs = std::filesystem;
  const std::string tok_path = (fs::path(folder) / "tokenizer.json").string();
  NS_ASSIGN_OR_RETURN(json tok, read_json_file(tok_path, kMaxTokenizerBytes));
  const std::string cfg_path = (fs::path(folder) / "tokenizer_config.json").string();
  if (!fs::exists(cfg_path)) return vocab_from_hf_json(tok, nullptr, tok_path);
  NS_ASSIGN_OR_RETURN(json cfg, read_json_file(cfg_path, kMaxConfigBytes));
  return vocab_from_hf_json(tok, &cfg, tok_path);
}

}  // namespace nanoserve
