// libFuzzer target: arbitrary bytes as the body of every endpoint the server
// parses. Each parse must return a request or an ApiError: never crash, hang
// or throw, whatever the nesting, numbers or encodings.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/protocol.h"
#include "server/responses.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nanoserve::server;
  std::string_view body(reinterpret_cast<const char*>(data), size);
  ProtocolLimits limits;
  limits.served_model_name = "m";
  limits.max_model_len = 2048;
  limits.max_num_seqs = 16;
  limits.vocab_size = 49152;
  auto chat = parse_chat_request(body, limits);
  auto completion = parse_completion_request(body, limits);
  (void)parse_tokenize_request(body, limits);
  (void)parse_detokenize_request(body, limits);
  // Whatever text came in must serialise back out (invalid UTF-8 replaced).
  if (auto* r = std::get_if<GenerateRequest>(&completion)) {
    ChunkPart part;
    for (const Prompt& p : r->prompts) {
      if (auto* s = std::get_if<std::string>(&p)) part.text += *s;
    }
    ResponseMeta meta{Endpoint::kCompletion, "cmpl-x", 0, r->model};
    (void)sse_event(chunk_json(meta, part, true, [](int32_t) { return std::string(); }));
  }
  if (auto* e = std::get_if<ApiError>(&chat)) (void)e->body();
  return 0;
}
