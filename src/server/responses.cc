#include "server/responses.h"

#include "server/api_error.h"

namespace nanoserve::server {

using nlohmann::json;

namespace {

json bytes_json(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

const char* object_name(Endpoint e, bool chunk) {
  if (e == Endpoint::kChat) return chunk ? "chat.completion.chunk" : "chat.completion";
  return "text_completion";
}

json header(const ResponseMeta& meta, bool chunk) {
  return json{{"id", meta.id},
              {"object", object_name(meta.endpoint, chunk)},
              {"created", meta.created},
              {"model", meta.model}};
}

}  // namespace

json usage_json(const Usage& usage) {
  return json{{"prompt_tokens", usage.prompt_tokens},
              {"completion_tokens", usage.completion_tokens},
              {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

json finish_reason_json(FinishReason reason) {
  if (reason == FinishReason::kNone) return nullptr;
  return finish_reason_name(reason);
}

json chat_logprobs_json(const std::vector<LogprobItem>& items, const TokenTextFn& token_text) {
  json content = json::array();
  for (const LogprobItem& it : items) {
    std::string text = token_text(it.token);
    json top = json::array();
    for (const TopLogprob& t : it.top) {
      std::string tt = token_text(t.token);
      top.push_back(json{{"token", tt}, {"logprob", t.logprob}, {"bytes", bytes_json(tt)}});
    }
    content.push_back(
        json{{"token", text}, {"logprob", it.logprob}, {"bytes", bytes_json(text)}, {"top_logprobs", top}});
  }
  return json{{"content", content}};
}

json completion_logprobs_json(const std::vector<LogprobItem>& items, const TokenTextFn& token_text,
                              int64_t text_offset) {
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       offsets = json::array();
  for (const LogprobItem& it : items) {
    std::string text = token_text(it.token);
    tokens.push_back(text);
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(text.size());
    if (it.none) {
      token_logprobs.push_back(nullptr);
      top_logprobs.push_back(nullptr);
      continue;
    }
    token_logprobs.push_back(it.logprob);
    json top = json::object();
    for (const TopLogprob& t : it.top) top[token_text(t.token)] = t.logprob;
    top[text] = it.logprob;  // the sampled token is always listed, as vLLM does
    top_logprobs.push_back(top);
  }
  return json{{"tokens", tokens},
              {"token_logprobs", token_logprobs},
              {"top_logprobs", top_logprobs},
              {"text_offset", offsets}};
}

json response_json(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices, const Usage& usage,
                   const TokenTextFn& token_text) {
  json out = header(meta, /*chunk=*/false);
  json arr = json::array();
  for (const ChoiceResult& c : choices) {
    json choice{{"index", c.index}};
    if (meta.endpoint == Endpoint::kChat) {
      json message{{"role", "assistant"}, {"content", c.text}};
      if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
      if (!c.tool_calls.is_null()) {
        message["tool_calls"] = c.tool_calls;
        if (c.text.empty()) message["content"] = nullptr;  // as OpenAI answers a call
      }
      if (!c.function_call.is_null()) {
        message["function_call"] = c.function_call;
        if (c.text.empty()) message["content"] = nullptr;
      }
      choice["message"] = std::move(message);
      choice["logprobs"] = c.with_logprobs ? chat_logprobs_json(c.logprobs, token_text) : json(nullptr);
    } else {
      choice["text"] = c.text;
      choice["logprobs"] =
          c.with_logprobs ? completion_logprobs_json(c.logprobs, token_text, 0) : json(nullptr);
      if (!c.prompt_logprobs.is_null()) choice["prompt_logprobs"] = c.prompt_logprobs;
    }
    choice["finish_reason"] = c.finish_name != nullptr ? json(c.finish_name) : finish_reason_json(c.finish);
    arr.push_back(std::move(choice));
  }
  out["choices"] = std::move(arr);
  out["usage"] = usage_json(usage);
  // Chat: one prompt, so vLLM gives its scores once, beside the choices.
  if (meta.endpoint == Endpoint::kChat && !choices.empty() && !choices.front().prompt_logprobs.is_null())
    out["prompt_logprobs"] = choices.front().prompt_logprobs;
  return out;
}

json chunk_json(const ResponseMeta& meta, const ChunkPart& part, bool include_usage,
                const TokenTextFn& token_text) {
  json out = header(meta, /*chunk=*/true);
  json choice{{"index", part.index}};
  if (meta.endpoint == Endpoint::kChat) {
    json delta = json::object();
    if (part.first) delta["role"] = "assistant";
    if (part.first || !part.text.empty()) delta["content"] = part.text;
    if (!part.reasoning.empty()) delta["reasoning_content"] = part.reasoning;
    if (!part.tool_calls.is_null()) delta["tool_calls"] = part.tool_calls;
    if (!part.function_call.is_null()) delta["function_call"] = part.function_call;
    choice["delta"] = std::move(delta);
    choice["logprobs"] = part.with_logprobs ? chat_logprobs_json(part.logprobs, token_text) : json(nullptr);
  } else {
    choice["text"] = part.text;
    choice["logprobs"] = part.with_logprobs
                             ? completion_logprobs_json(part.logprobs, token_text, part.text_offset)
                             : json(nullptr);
  }
  choice["finish_reason"] =
      part.finish_name != nullptr ? json(part.finish_name) : finish_reason_json(part.finish);
  out["choices"] = json::array({std::move(choice)});
  if (include_usage) out["usage"] = nullptr;
  return out;
}

json usage_chunk_json(const ResponseMeta& meta, const Usage& usage) {
  json out = header(meta, /*chunk=*/true);
  out["choices"] = json::array();
  out["usage"] = usage_json(usage);
  return out;
}

std::string sse_event(const json& j) {
  return "data: " + dump_json(j) + "\n\n";
}

}  // namespace nanoserve::server
