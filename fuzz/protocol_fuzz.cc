// libFuzzer target: arbitrary bytes as the body of every endpoint the server
// parses (chat, completions, tokenize, detokenize). Each parse must return a
// request or an ApiError: never crash, hang or throw, whatever the nesting,
// numbers or encodings. What it returns must serialise (an error body, a
// stream chunk of the prompt text) and must satisfy every bound the parser
// promises to the engine; a broken promise aborts, so libFuzzer keeps the input.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/protocol.h"
#include "server/protocol_fields.h"
#include "server/responses.h"

// An invariant of an accepted request; the fuzzer reports the input that broke it.
#define FUZZ_REQUIRE(cond)                                                           \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "protocol_fuzz: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)

namespace {

using namespace nanoserve::server;

ProtocolLimits fuzz_limits() {
  ProtocolLimits limits;
  limits.served_model_name = "m";
  limits.max_model_len = 2048;
  limits.max_num_seqs = 16;
  limits.vocab_size = 49152;
  return limits;
}

// Errors name what was wrong without echoing the body back: user text is quoted
// as an excerpt (quote_excerpt), so a message stays short whatever came in.
constexpr size_t kMaxErrorMessageBytes = 512;

void check_error(const ApiError& e) {
  FUZZ_REQUIRE(e.http_status == 400 || e.http_status == 404);
  FUZZ_REQUIRE(!e.message.empty() && e.message.size() <= kMaxErrorMessageBytes);
  std::string body = e.body();
  FUZZ_REQUIRE(body.size() >= e.message.size() / 4);  // the message is in the body, escaped or replaced
}

void check_token_ids(const std::vector<int32_t>& ids, const ProtocolLimits& limits) {
  for (int32_t id : ids) FUZZ_REQUIRE(id >= 0 && id < limits.vocab_size);
}

bool unit_interval(float x, bool open_at_zero) {
  return std::isfinite(x) && x <= 1 && (open_at_zero ? x > 0 : x >= 0);
}

// Every field the engine reads is within the bounds protocol.h documents.
void check_generate(const GenerateRequest& r, const ProtocolLimits& limits) {
  FUZZ_REQUIRE(r.model == limits.served_model_name);
  FUZZ_REQUIRE(r.n >= 1 && r.n <= limits.max_num_seqs);
  const nanoserve::SamplingParams& p = r.params;
  FUZZ_REQUIRE(p.stop.size() <= kMaxStopStrings);
  for (const std::string& s : p.stop) FUZZ_REQUIRE(!s.empty() && s.size() <= kMaxStopStringBytes);
  FUZZ_REQUIRE(!r.include_usage || r.stream);
  // 0 only asks to score or echo the prompt (completions).
  const bool may_be_zero = (r.echo || r.prompt_logprobs) && r.endpoint == Endpoint::kCompletion;
  FUZZ_REQUIRE(!r.max_tokens || *r.max_tokens >= (may_be_zero ? 0 : 1));
  FUZZ_REQUIRE(std::isfinite(p.temperature) && p.temperature >= 0 && p.temperature <= 100);
  FUZZ_REQUIRE(unit_interval(p.top_p, /*open_at_zero=*/true));
  FUZZ_REQUIRE(unit_interval(p.min_p, /*open_at_zero=*/false));
  FUZZ_REQUIRE(p.top_k >= -1);
  FUZZ_REQUIRE(std::isfinite(p.presence_penalty) && std::fabs(p.presence_penalty) <= 2);
  FUZZ_REQUIRE(std::isfinite(p.frequency_penalty) && std::fabs(p.frequency_penalty) <= 2);
  FUZZ_REQUIRE(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0 &&
               p.repetition_penalty <= 100);
  FUZZ_REQUIRE(p.top_logprobs >= 0 && p.top_logprobs <= kMaxTopLogprobs && (p.logprobs || p.top_logprobs == 0));
  FUZZ_REQUIRE(r.best_of == 0 || (r.best_of >= r.n && r.best_of <= limits.max_num_seqs));
  FUZZ_REQUIRE(r.best_of <= 1 || !r.stream);
  FUZZ_REQUIRE(p.min_tokens >= 0 && (!r.max_tokens || p.min_tokens <= *r.max_tokens));
  FUZZ_REQUIRE(p.stop_token_ids.size() <= kMaxStopTokenIds);
  for (int32_t id : p.stop_token_ids) FUZZ_REQUIRE(id >= 0 && id < limits.vocab_size);
  FUZZ_REQUIRE(p.logit_bias.size() <= kMaxLogitBias);
  for (const auto& [id, bias] : p.logit_bias) {
    FUZZ_REQUIRE(id >= 0 && id < limits.vocab_size);
    FUZZ_REQUIRE(std::isfinite(bias) && std::fabs(bias) <= kMaxLogitBiasValue);
  }
  for (const ChatMessage& m : r.messages) FUZZ_REQUIRE(!m.role.empty());
  if (r.endpoint == Endpoint::kChat) {
    FUZZ_REQUIRE(!r.messages.empty() && r.messages.size() <= kMaxMessages);
    FUZZ_REQUIRE(r.prompts.empty());
  } else {
    FUZZ_REQUIRE(!r.prompts.empty() && r.prompts.size() <= kMaxPrompts);
    FUZZ_REQUIRE(r.messages.empty());
    for (const Prompt& prompt : r.prompts) {
      if (const auto* text = std::get_if<std::string>(&prompt)) {
        FUZZ_REQUIRE(!text->empty());
      } else {
        const auto& ids = std::get<std::vector<int32_t>>(prompt);
        FUZZ_REQUIRE(!ids.empty());
        check_token_ids(ids, limits);
      }
    }
  }
  // What the server does next with the prompt's length must not fail either.
  (void)check_context_length(1, r.max_tokens, limits.max_model_len);
}

// The request's text goes back out as a stream chunk, as an echo of the prompt would.
void serialise(const GenerateRequest& r) {
  ChunkPart part;
  part.first = true;
  for (const ChatMessage& m : r.messages) part.text += m.role + ": " + m.content;
  for (const Prompt& p : r.prompts) {
    if (const auto* s = std::get_if<std::string>(&p)) part.text += *s;
  }
  for (const std::string& s : r.params.stop) part.text += s;
  ResponseMeta meta{r.endpoint, "cmpl-x", 0, r.model};
  std::string event =
      sse_event(chunk_json(meta, part, r.include_usage, [](int32_t) { return std::string(); }));
  FUZZ_REQUIRE(event.size() > part.text.size() / 4);
}

template <typename T>
const T* accepted(const Parsed<T>& parsed) {
  if (const auto* e = std::get_if<ApiError>(&parsed)) {
    check_error(*e);
    return nullptr;
  }
  return &std::get<T>(parsed);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ProtocolLimits limits = fuzz_limits();
  std::string_view body(reinterpret_cast<const char*>(data), size);

  for (auto parse : {parse_chat_request, parse_completion_request}) {
    auto parsed = parse(body, limits);
    if (const GenerateRequest* r = accepted(parsed)) {
      check_generate(*r, limits);
      serialise(*r);
    }
  }
  auto tokenize = parse_tokenize_request(body, limits);
  if (const TokenizeRequest* r = accepted(tokenize)) {
    FUZZ_REQUIRE(r->prompt.has_value() != !r->messages.empty());
    FUZZ_REQUIRE(r->messages.size() <= kMaxMessages);
    (void)dump_json(nlohmann::json(r->prompt.value_or(std::string())));
  }
  auto detokenize = parse_detokenize_request(body, limits);
  if (const DetokenizeRequest* r = accepted(detokenize)) {
    check_token_ids(r->tokens, limits);
  }
  return 0;
}
