// nanoserve bench serve's prompts (cli/bench_serve.h): the random dataset of
// known token counts, and the sharegpt/custom files, each turned into the
// streamed request bodies of the run.
//
// The random dataset gives every prompt a known token count. A pool of common
// English words is tokenized once by the server's /tokenize (vLLM's and
// nanoserve's shape, else llama.cpp's), and only the words that are one token
// each (with their leading space) are kept. Then:
//   ids  (default for /v1/completions): the prompt is a list of pool token
//       ids, which the server takes as they are: the length is exact by
//       construction.
//   text (default for chat): the prompt is pool words, each with its leading
//       space; every prompt is tokenized again and trimmed or grown until its
//       count is the target, so it is exact too (the chat template's own
//       tokens come on top, as they do in vLLM's count).
// Without /tokenize, text prompts count one token per word (approximate; the
// table's input tokens come from the server's usage either way).

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cli/bench_serve.h"

namespace nanoserve::cli {

namespace {

using json = nlohmann::json;

constexpr double kTokenizeTimeoutS = 30;

// Common words; most are one token, with a leading space, in any BPE vocabulary
// of 32k or more. Whatever is not is dropped by the pool check.
constexpr const char* kWords[] = {
    "the",    "of",       "and",      "to",     "in",      "is",       "that",    "for",    "it",
    "as",     "was",      "with",     "be",     "by",      "on",       "not",     "he",     "this",
    "are",    "or",       "his",      "from",   "at",      "which",    "but",     "have",   "an",
    "had",    "they",     "you",      "were",   "their",   "one",      "all",     "we",     "can",
    "her",    "has",      "there",    "been",   "if",      "more",     "when",    "will",   "would",
    "who",    "so",       "no",       "time",   "people",  "year",     "way",     "day",    "man",
    "thing",  "woman",    "life",     "child",  "world",   "school",   "state",   "family", "student",
    "group",  "country",  "problem",  "hand",   "part",    "place",    "case",    "week",   "company",
    "system", "program",  "question", "work",   "number",  "night",    "point",   "home",   "water",
    "room",   "mother",   "area",     "money",  "story",   "fact",     "month",   "lot",    "right",
    "study",  "book",     "eye",      "job",    "word",    "business", "issue",   "side",   "kind",
    "head",   "house",    "service",  "friend", "father",  "power",    "hour",    "game",   "line",
    "end",    "member",   "law",      "car",    "city",    "name",     "team",    "minute", "idea",
    "kid",    "body",     "back",     "parent", "face",    "others",   "level",   "office", "door",
    "health", "person",   "art",      "war",    "history", "party",    "result",  "change", "morning",
    "reason", "research", "girl",     "guy",    "moment",  "air",      "teacher", "force",  "education",
    "good",   "new",      "first",    "last",   "long",    "great",    "little",  "own",    "other",
    "old",    "big",      "high",
};

struct PoolWord {
  std::string text;  // with its leading space
  int64_t id = -1;   // -1: not known (no /tokenize)
};

// The words that are exactly one token each.
StatusOr<std::vector<PoolWord>> word_pool(ServerTokenizer& tok) {
  std::vector<PoolWord> pool;
  std::string joined;
  for (const char* w : kWords) joined += std::string(" ") + w;
  StatusOr<std::vector<int64_t>> all = tok.tokenize(joined);
  if (!all.ok()) return all.status();
  constexpr size_t n = std::size(kWords);
  if (all->size() == n) {  // every word is at least one token, so each is exactly one
    for (size_t i = 0; i < n; ++i) pool.push_back({std::string(" ") + kWords[i], (*all)[i]});
    return pool;
  }
  for (const char* w : kWords) {
    StatusOr<std::vector<int64_t>> one = tok.tokenize(std::string(" ") + w);
    if (!one.ok()) return one.status();
    if (one->size() == 1) pool.push_back({std::string(" ") + w, (*one)[0]});
  }
  if (pool.size() < 8) return failed_precondition("fewer than 8 one-token words in this vocabulary");
  return pool;
}

int32_t draw_len(std::mt19937_64& rng, int len, double ratio) {
  const int lo = std::max(1, static_cast<int>(std::floor(len * (1.0 - ratio))));
  const int hi = std::max(lo, static_cast<int>(std::ceil(len * (1.0 + ratio))));
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

std::string words_text(const std::vector<size_t>& picks, const std::vector<PoolWord>& pool) {
  std::string s;
  for (size_t p : picks) s += pool[p].text;
  return s;
}

}  // namespace

StatusOr<std::vector<int64_t>> ServerTokenizer::tokenize(const std::string& text) {
  std::string last;
  for (int shape = llama_shape_ ? 1 : 0; shape < 2; ++shape) {
    const json body = shape == 0 ? json{{"model", model_}, {"prompt", text}, {"add_special_tokens", false}}
                                 : json{{"content", text}, {"add_special", false}};
    StatusOr<HttpReply> r = http_fetch(url_, "POST", "/tokenize", body.dump(), key_, kTokenizeTimeoutS);
    if (!r.ok()) return r.status();
    json j = json::parse(r->body, nullptr, false);
    if (r->status == 200 && !j.is_discarded() && j.is_object() && j.contains("tokens") &&
        j["tokens"].is_array()) {
      std::vector<int64_t> ids;
      for (const json& t : j["tokens"]) {
        if (!t.is_number_integer()) return failed_precondition("/tokenize: a token that is not an id");
        ids.push_back(t.get<int64_t>());
      }
      llama_shape_ = shape == 1;
      return ids;
    }
    last = "HTTP " + std::to_string(r->status) + ": " + r->body.substr(0, 200);
  }
  return unimplemented("POST /tokenize: " + last);
}

BenchRequest RequestShape::request(const json& prompt, int64_t prompt_len, int64_t max_tokens) const {
  json body = {{"model", model},
               {"temperature", temperature},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (chat) {
    body["messages"] = json::array({{{"role", "user"}, {"content", prompt}}});
    body["max_completion_tokens"] = max_tokens;
  } else {
    body["prompt"] = prompt;
    body["max_tokens"] = max_tokens;
  }
  if (ignore_eos) body["ignore_eos"] = true;
  for (const auto& [k, v] : extra.items()) body[k] = v;
  return {body.dump(), prompt_len, max_tokens};
}

StatusOr<PromptSet> random_prompts(const RandomPrompts& a, const RequestShape& shape, ServerTokenizer& tok) {
  StatusOr<std::vector<PoolWord>> pool = word_pool(tok);
  const bool tokenizer_ok = pool.ok();
  if (!pool.ok()) {
    if (a.ids) {
      return failed_precondition("token-id prompts need the server's /tokenize (" + pool.status().message() +
                                 "); use --prompt-kind text");
    }
    std::fprintf(stderr, "nanoserve bench serve: no /tokenize (%s): prompt lengths are approximate\n",
                 pool.status().message().c_str());
    pool = std::vector<PoolWord>();
    for (const char* w : kWords) pool->push_back({std::string(" ") + w, -1});
  }
  std::mt19937_64 rng(a.seed);
  std::uniform_int_distribution<size_t> word(0, pool->size() - 1);
  std::vector<size_t> prefix(static_cast<size_t>(a.prefix_len));
  for (size_t& p : prefix) p = word(rng);
  PromptSet d;
  int adjusted = 0, off = 0;
  for (int i = 0; i < a.num_prompts; ++i) {
    const int32_t in = draw_len(rng, a.input_len, a.range_ratio);
    const int32_t out = draw_len(rng, a.output_len, a.range_ratio);
    std::vector<size_t> picks = prefix;
    for (int32_t k = 0; k < in; ++k) picks.push_back(word(rng));
    const int64_t target = static_cast<int64_t>(picks.size());
    int64_t actual = target;
    json prompt;
    if (a.ids) {
      prompt = json::array();
      for (size_t p : picks) prompt.push_back((*pool)[p].id);
    } else {
      std::string text = words_text(picks, *pool);
      if (tokenizer_ok) {
        // A pair of words may merge into other tokens; trim or grow until the count is right.
        for (int round = 0; round < 6; ++round) {
          StatusOr<std::vector<int64_t>> t = tok.tokenize(text);
          if (!t.ok()) return t.status();
          actual = static_cast<int64_t>(t->size());
          if (actual == target) break;
          if (round == 0) ++adjusted;
          if (actual > target) {
            picks.resize(picks.size() -
                         std::min<size_t>(picks.size() - 1, static_cast<size_t>(actual - target)));
          } else {
            for (int64_t k = actual; k < target; ++k) picks.push_back(word(rng));
          }
          text = words_text(picks, *pool);
        }
        if (actual != target) ++off;
      }
      prompt = text;
    }
    d.requests.push_back(shape.request(prompt, actual, out));
  }
  if (a.ids) {
    d.how = "token ids (exact by construction)";
  } else if (tokenizer_ok) {
    d.how = "text, checked by /tokenize (" + std::to_string(adjusted) + " adjusted, " + std::to_string(off) +
            " still off)";
  } else {
    d.how = "text, about one token per word (no /tokenize: approximate)";
  }
  return d;
}

StatusOr<PromptSet> file_prompts(const std::string& dataset_name, const DatasetFlags& flags, int num_prompts,
                                 uint64_t seed, const RequestShape& shape, ServerTokenizer& tok) {
  auto count = [&tok](const std::string& text) -> StatusOr<int64_t> {
    StatusOr<std::vector<int64_t>> t = tok.tokenize(text);
    if (!t.ok())
      return Status(t.status().code(),
                    "--dataset-name needs the server's /tokenize: " + t.status().message());
    return static_cast<int64_t>(t->size());
  };
  NS_ASSIGN_OR_RETURN(std::vector<DatasetPrompt> prompts,
                      load_dataset(dataset_name, flags, num_prompts, seed, count));
  PromptSet d;
  for (const DatasetPrompt& p : prompts)
    d.requests.push_back(shape.request(p.prompt, p.prompt_len, p.output_len));
  d.how = dataset_name + " " + flags.path + " (text, counted by /tokenize)";
  return d;
}

}  // namespace nanoserve::cli
