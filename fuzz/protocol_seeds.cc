// Writes the protocol fuzzer's seed corpus into the directory given as argv[1]:
// valid bodies of every endpoint (chat, completions with each prompt shape,
// tokenize, detokenize) and the malformed rows the server's validation tests
// use (tests/server/protocol_test.cc, tests/server/test_validation.py), one
// body per file.

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace {

const std::string kMsgs = R"("messages": [{"role": "user", "content": "hi"}])";

std::string chat_with(const std::string& field, const std::string& value) {
  return R"({"model": "m", )" + kMsgs + ", \"" + field + "\": " + value + "}";
}

std::string completion_with(const std::string& field, const std::string& value) {
  return R"({"model": "m", "prompt": "hi", ")" + field + "\": " + value + "}";
}

std::string repeat(const std::string& s, int n, const std::string& sep) {
  std::string out;
  for (int i = 0; i < n; ++i) out += (i ? sep : "") + s;
  return out;
}

std::vector<std::pair<std::string, std::string>> seeds() {
  std::vector<std::pair<std::string, std::string>> s;
  // Valid chat requests.
  s.emplace_back("chat_minimal", "{" + kMsgs + "}");
  s.emplace_back("chat_every_field", R"({"model": "m", )" + kMsgs + R"(, "max_tokens": 7, "temperature": 0.5,
      "top_p": 0.9, "top_k": 40, "min_p": 0.05, "n": 2, "stop": ["x", "yz"], "seed": 42,
      "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "logprobs": true,
      "top_logprobs": 3, "stream": true, "stream_options": {"include_usage": true}, "ignore_eos": true})");
  s.emplace_back("chat_roles", R"({"messages": [{"role": "system", "content": "Be brief."},
      {"role": "developer", "content": null}, {"role": "user", "content": [{"type": "text", "text": "a"},
      {"type": "text", "text": "b\u00e9\ud83d\ude00\n"}]}, {"role": "assistant", "content": "ok"},
      {"role": "tool", "content": ""}]})");
  s.emplace_back("chat_options",
                 R"({"model": null, )" + kMsgs +
                     R"(, "stop": "end", "seed": -9223372036854775808, "logit_bias": {}, "n": 16,
      "max_completion_tokens": 2147483647, "temperature": 0, "top_k": -1, "stream": false, "logprobs": false})");
  s.emplace_back("chat_stream", "{" + kMsgs + R"(, "stream": true, "max_tokens": 1, "top_p": 1e-3})");
  s.emplace_back("chat_small_numbers", "{" + kMsgs + R"(, "top_p": 1e-5, "repetition_penalty": 2e-5,
      "min_p": 3e-5, "temperature": 4e-5, "presence_penalty": -5e-5, "frequency_penalty": 6e-5})");
  // Valid completion requests: each prompt shape.
  s.emplace_back("completion_string", R"({"model": "m", "prompt": "Once upon a time", "max_tokens": 16})");
  s.emplace_back("completion_strings", R"({"prompt": ["a", "b c", "\u0000"], "n": 2, "temperature": 0})");
  s.emplace_back("completion_ids", R"({"prompt": [1, 2, 3, 49151], "logprobs": 5, "echo": false})");
  s.emplace_back("completion_id_lists", R"({"prompt": [[1], [2, 3], [0]], "suffix": null, "seed": 7})");
  s.emplace_back(
      "completion_stream",
      R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": false}, "stop": "\n"})");
  // Valid tokenize and detokenize requests.
  s.emplace_back("tokenize_prompt", R"({"model": "m", "prompt": "hello", "add_special_tokens": false})");
  s.emplace_back("tokenize_messages", "{" + kMsgs + R"(, "add_generation_prompt": false})");
  s.emplace_back("detokenize", R"({"model": "m", "tokens": [1, 2, 3]})");
  s.emplace_back("detokenize_empty", R"({"tokens": []})");

  // Wrong types (test_validation.py test_wrong_types_are_400).
  const std::vector<std::pair<std::string, std::string>> wrong_types = {
      {"max_tokens", R"("7")"},
      {"max_tokens", "1.5"},
      {"temperature", R"("hot")"},
      {"top_p", "[1]"},
      {"n", "true"},
      {"stream", "1"},
      {"stop", "5"},
      {"stop", "[1, 2]"},
      {"seed", R"("x")"},
      {"logprobs", "3"},
      {"top_k", "1.5"},
      {"messages", R"("hi")"},
  };
  for (size_t i = 0; i < wrong_types.size(); ++i) {
    s.emplace_back("bad_type_" + std::to_string(i), chat_with(wrong_types[i].first, wrong_types[i].second));
  }
  s.emplace_back("bad_no_role", R"({"messages": [{"content": "no role"}]})");
  s.emplace_back("bad_content_type", R"({"messages": [{"role": "user", "content": 5}]})");
  s.emplace_back("bad_role", R"({"messages": [{"role": "wizard", "content": "hi"}]})");
  s.emplace_back("bad_image_part", R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})");
  // Out of range (test_out_of_range_is_400, Protocol.RangeChecks).
  const std::vector<std::pair<std::string, std::string>> out_of_range = {
      {"max_tokens", "0"},
      {"max_tokens", "-1"},
      {"max_completion_tokens", "0"},
      {"n", "0"},
      {"n", "17"},
      {"temperature", "-0.5"},
      {"top_p", "0"},
      {"top_p", "1.5"},
      {"top_k", "-2"},
      {"min_p", "2"},
      {"presence_penalty", "3"},
      {"frequency_penalty", "-3"},
      {"repetition_penalty", "0"},
      {"top_logprobs", "2"},
      {"max_tokens", "18446744073709551615"},
      {"seed", "18446744073709551615"},
  };
  for (size_t i = 0; i < out_of_range.size(); ++i) {
    s.emplace_back("bad_range_" + std::to_string(i),
                   chat_with(out_of_range[i].first, out_of_range[i].second));
  }
  s.emplace_back("bad_top_logprobs", "{" + kMsgs + R"(, "logprobs": true, "top_logprobs": 30})");
  s.emplace_back("bad_completion_logprobs", completion_with("logprobs", "21"));
  s.emplace_back("bad_completion_logprobs_bool", completion_with("logprobs", "true"));
  s.emplace_back("echo", completion_with("echo", "true"));
  s.emplace_back(
      "echo_score",
      "{" + std::string(R"("prompt": [1, 2, 3], "echo": true, "logprobs": 1, "max_tokens": 0)") + "}");
  s.emplace_back("prompt_logprobs", chat_with("prompt_logprobs", "5"));
  s.emplace_back("bad_max_tokens_zero", completion_with("max_tokens", "0"));
  s.emplace_back("guided_json",
                 completion_with("guided_json", R"({"properties": {"b": {}, "a": {"pattern": "x+"}}})"));
  s.emplace_back("guided_json_text", chat_with("guided_json", R"("{"type": "string", "format": "date"}")"));
  s.emplace_back("guided_regex", completion_with("guided_regex", R"("(a|b){2,3}\d")"));
  s.emplace_back("guided_choice", chat_with("guided_choice", R"(["yes", "no"])"));
  s.emplace_back("structured_outputs",
                 completion_with("structured_outputs", R"({"choice": ["x"], "json": null})"));
  s.emplace_back("bad_guided_grammar", chat_with("guided_grammar", R"("root ::= x")"));
  s.emplace_back("bad_structured_outputs",
                 chat_with("structured_outputs", R"({"regex": "a", "choice": ["b"]})"));
  s.emplace_back("bad_suffix", completion_with("suffix", R"("x")"));
  s.emplace_back("bad_logit_bias", chat_with("logit_bias", R"({"50256": -100})"));
  s.emplace_back("bad_stream_options", chat_with("stream_options", R"({"include_usage": true})"));
  s.emplace_back("bad_stream_options_type", "{" + kMsgs + R"(, "stream": true, "stream_options": 1})");
  // Not JSON, or not an object (test_invalid_json_is_400).
  const std::vector<std::string> not_json = {"{not json",
                                             "",
                                             "[1,2]",
                                             R"({"messages": [})",
                                             "null",
                                             "\"x\"",
                                             R"({"a": 1,})",
                                             "{\"a\": \"\xff\"}",
                                             "{\"a\": \"\\ud800\"}"};
  for (size_t i = 0; i < not_json.size(); ++i) s.emplace_back("bad_json_" + std::to_string(i), not_json[i]);
  // Numbers beyond float or double, and what JSON has no literal for.
  for (const char* literal : {"NaN", "Infinity", "-Infinity", "1e999", "1e39", "-1e999", "4.9e-324"}) {
    s.emplace_back(std::string("bad_number_") + literal, chat_with("temperature", literal));
  }
  s.emplace_back("bad_model", chat_with("model", R"("gpt-4o")"));
  s.emplace_back("bad_model_type", chat_with("model", "1"));
  // Empty prompt or messages, token ids outside the vocabulary.
  s.emplace_back("bad_empty_messages", R"({"messages": []})");
  s.emplace_back("bad_no_messages", R"({"model": "m"})");
  for (const char* prompt : {R"("")", "[]", R"(["a", ""])", "[[1, 2], []]", "[[]]", R"(["a", [1]])",
                             R"([1, "a"])", "[10000000]", "[-1]", "5", "[[1], [49152]]"}) {
    s.emplace_back("bad_prompt_" + std::to_string(s.size()), std::string(R"({"prompt": )") + prompt + "}");
  }
  s.emplace_back("bad_detokenize", R"({"tokens": [5000000]})");
  s.emplace_back("bad_detokenize_type", R"({"tokens": "1 2"})");
  s.emplace_back("bad_tokenize_both", "{" + kMsgs + R"(, "prompt": "x"})");
  s.emplace_back("bad_tokenize_neither", "{}");
  // Bounds: one past each limit (protocol.h).
  s.emplace_back("bad_stop_count", chat_with("stop", "[" + repeat(R"("s")", 17, ", ") + "]"));
  s.emplace_back("bad_stop_bytes", chat_with("stop", "\"" + std::string(257, 'x') + "\""));
  s.emplace_back("bad_stop_empty", chat_with("stop", R"([""])"));
  s.emplace_back("bad_prompt_count", R"({"prompt": [)" + repeat(R"("a")", 257, ",") + "]}");
  s.emplace_back("bad_nesting", chat_with("x", std::string(65, '[') + std::string(65, ']')));
  s.emplace_back("ok_nesting", chat_with("x", std::string(62, '[') + std::string(62, ']')));
  return s;
}

// Bodies at the server's size limit (HttpOptions::max_body_bytes, 4 MiB) built
// to be slow or large once parsed: long numbers, many small values, deep
// nesting repeated, many keys, long strings echoed in errors. Each is padded or
// cut to `limit` bytes and stays valid JSON where the shape allows.
std::vector<std::pair<std::string, std::string>> limit_bodies(size_t limit) {
  auto fill = [&](const std::string& head, const std::string& unit, const std::string& sep,
                  const std::string& tail) {
    std::string body = head;
    size_t n = (limit - head.size() - tail.size()) / (unit.size() + sep.size());
    body.reserve(limit);
    for (size_t i = 0; i < n; ++i) body += (i ? sep : "") + unit;
    return body + tail;
  };
  const std::string chat = "{" + kMsgs + ", ";
  const std::string nest = std::string(60, '[') + std::string(60, ']');
  std::vector<std::pair<std::string, std::string>> s;
  s.emplace_back("limit_int_digits", fill(chat + "\"max_tokens\": 1", "0", "", "}"));
  s.emplace_back("limit_frac_digits", fill(chat + "\"temperature\": 0.", "0", "", "1}"));
  s.emplace_back("limit_exp_digits", fill(chat + "\"temperature\": 1e-", "0", "", "1}"));
  s.emplace_back("limit_token_ids", fill(R"({"tokens": [)", "1", ",", "]}"));
  s.emplace_back("limit_prompt_ids", fill(R"({"prompt": [)", "1", ",", "]}"));
  s.emplace_back("limit_empty_objects", fill(R"({"messages": [)", "{}", ",", "]}"));
  s.emplace_back("limit_empty_arrays", fill(R"({"prompt": [)", "[]", ",", "]}"));
  s.emplace_back("limit_nesting", fill(chat + "\"x\": [", nest, ",", "]}"));
  s.emplace_back("limit_keys", fill("{", R"("k": 0)", ",", "}"));
  s.emplace_back("limit_stop_strings", fill(chat + "\"stop\": [", R"("a")", ",", "]}"));
  s.emplace_back("limit_escapes", fill(R"({"prompt": ")", "\\u00e9", "", "\"}"));
  s.emplace_back("limit_content_parts", fill(R"({"messages": [{"role": "user", "content": [)",
                                             R"({"type": "text", "text": "a"})", ",", "]}]}"));
  s.emplace_back("limit_role", fill(R"({"messages": [{"role": ")", "a", "", "\"}]}"));
  s.emplace_back("limit_model", fill(R"({"model": ")", "a", "", "\"}"));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const bool limit = argc == 3 && std::string(argv[1]) == "--limit";
  if (argc != 2 && !limit) {
    std::fprintf(stderr, "usage: %s OUT_DIR | --limit OUT_DIR (bodies of 4 MiB)\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[argc - 1];
  int n = 0;
  for (const auto& [name, body] : limit ? limit_bodies(size_t{4} << 20) : seeds()) {
    std::ofstream f(dir + "/" + name + ".json", std::ios::binary);
    f << body;
    ++n;
  }
  std::printf("fuzz seeds: wrote %d files to %s\n", n, dir.c_str());
  return 0;
}
