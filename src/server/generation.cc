#include "server/generation.h"

#include <algorithm>
#include <utility>

namespace nanoserve::server {

GenerationJob::GenerationJob(EngineLoop& loop, EngineLoop::Handle handle, ResponseMeta meta,
                             const GenerateRequest& request, int64_t prompt_tokens, TokenTextFn token_text,
                             OutputShape shape)
    : loop_(loop),
      handle_(std::move(handle)),
      meta_(std::move(meta)),
      stream_(request.stream),
      include_usage_(request.include_usage),
      with_logprobs_(request.params.logprobs),
      n_(request.n),
      candidates_(std::max(request.n, request.best_of)),
      prompt_tokens_(prompt_tokens),
      token_text_(std::move(token_text)),
      choices_(handle_.ids.size()),
      shape_(std::move(shape)) {
  for (Choice& c : choices_) {
    if (shape_.reasoning) c.reasoning_parser.emplace(shape_.prompt_tail);
    if (shape_.tool_format != ToolFormat::kNone)
      c.tool_parser.emplace(shape_.tool_format, shape_.new_call_id);
  }
}

void GenerationJob::shape(Choice& c, std::string_view text, bool final, ChunkPart* part) {
  // The choice keeps its whole text when streaming too: the Responses stream ends with the whole response.
  if (!c.reasoning_parser && !c.tool_parser) {
    if (part != nullptr) part->text.append(text);
    if (part == nullptr || responses_) c.text.append(text);
    return;
  }
  std::string reasoning, content;
  if (c.reasoning_parser) {
    c.reasoning_parser->feed(text, &reasoning, &content);
    if (final) c.reasoning_parser->finish(&reasoning, &content);
  } else {
    content.assign(text);
  }
  ParsedText parsed;
  if (c.tool_parser) {
    c.tool_parser->feed(content, &parsed);
    if (final) c.tool_parser->finish(&parsed);
  } else {
    parsed.content = std::move(content);
  }
  if (part != nullptr) {
    part->text += parsed.content;
    part->reasoning += reasoning;
    if (!parsed.calls.empty()) {
      nlohmann::json deltas = call_deltas_json(parsed.calls);
      if (shape_.legacy_functions) {
        // One call: its name first, then argument fragments, as function_call deltas.
        nlohmann::json fc = nlohmann::json::object();
        std::string args;
        for (const ToolCallDelta& d : parsed.calls) {
          if (d.index != 0) continue;
          if (d.first) fc["name"] = d.name;
          args += d.arguments;
        }
        if (!fc.empty() || !args.empty()) {
          fc["arguments"] = args;
          part->function_call = fc;
        }
      } else if (part->tool_calls.is_null()) {
        part->tool_calls = std::move(deltas);
      } else {
        for (auto& d : deltas) part->tool_calls.push_back(std::move(d));
      }
    }
  }
  if (part == nullptr || responses_) {
    c.text += parsed.content;
    c.reasoning += reasoning;
  }
}

nlohmann::json GenerationJob::call_deltas_json(const std::vector<ToolCallDelta>& deltas) const {
  nlohmann::json out = nlohmann::json::array();
  for (const ToolCallDelta& d : deltas) {
    nlohmann::json fn{{"arguments", d.arguments}};
    nlohmann::json e{{"index", d.index}};
    if (d.first) {
      e["id"] = d.id;
      e["type"] = "function";
      fn["name"] = d.name;
    }
    e["function"] = std::move(fn);
    out.push_back(std::move(e));
  }
  return out;
}

const char* GenerationJob::finish_name(const Choice& c, FinishReason finish) const {
  if (finish != FinishReason::kStop || !c.tool_parser || c.tool_parser->calls().empty()) return nullptr;
  return shape_.legacy_functions ? "function_call" : "tool_calls";
}

GenerationJob::~GenerationJob() {
  handle_.stream->set_on_ready({});
  abort();
}

void GenerationJob::set_on_ready(std::function<void()> on_ready) {
  handle_.stream->set_on_ready(std::move(on_ready));
}

void GenerationJob::abort() {
  if (!done_) loop_.abort(handle_);
}

bool GenerationJob::poll(std::string* sse_out, std::chrono::milliseconds timeout) {
  if (done_) return true;
  if (stream_ && !started_ && anthropic_) {
    *sse_out += anthropic_->start(prompt_tokens_);
  } else if (stream_ && !started_ && responses_) {
    *sse_out += responses_->start();
  } else if (stream_ && !started_ && meta_.endpoint == Endpoint::kChat) {
    // The first chunk of every choice carries the role, before any token.
    for (size_t i = 0; i < choices_.size(); ++i) {
      ChunkPart part;
      part.index = static_cast<int>(i);
      part.first = true;
      part.with_logprobs = false;
      *sse_out += sse_event(chunk_json(meta_, part, include_usage_, token_text_));
    }
  }
  started_ = true;

  events_.clear();
  handle_.stream->wait_take(&events_, timeout);
  // Group this batch per choice so one chunk carries all of a choice's new tokens.
  std::vector<ChunkPart> parts(choices_.size());
  std::vector<bool> touched(choices_.size(), false);
  for (size_t i = 0; i < parts.size(); ++i) {
    parts[i].index = static_cast<int>(i);
    parts[i].with_logprobs = with_logprobs_;
    parts[i].text_offset = choices_[i].text_offset;
  }
  std::string error_message;
  bool rejected = false;
  bool aborted = false;
  for (TokenEvent& ev : events_) {
    Choice& c = choices_[ev.choice];
    ChunkPart& part = parts[ev.choice];
    touched[ev.choice] = true;
    if (!c.started) start_choice(static_cast<size_t>(ev.choice), ev, stream_ ? &part : nullptr);
    if (ev.token >= 0) {
      ++completion_tokens_;
      c.cumulative_logprob += ev.logprob;
      if (with_logprobs_) {
        LogprobItem item{ev.token, ev.logprob, std::move(ev.top_logprobs)};
        if (stream_)
          part.logprobs.push_back(item);
        else
          c.logprobs.push_back(std::move(item));
      }
    }
    shape(c, ev.text, ev.finish != FinishReason::kNone, stream_ ? &part : nullptr);
    c.text_offset += static_cast<int64_t>(ev.text.size());
    if (ev.finish != FinishReason::kNone) {
      c.finish = ev.finish;
      c.stop_string = ev.stop_string;
      part.finish = ev.finish;
      part.finish_name = finish_name(c, ev.finish);
      ++n_finished_;
      if (ev.finish == FinishReason::kError || ev.finish == FinishReason::kAbort) {
        error_message =
            ev.finish == FinishReason::kError ? ev.error : "The request was aborted by the server.";
        rejected = ev.rejected;
        aborted = ev.finish == FinishReason::kAbort;
      }
    }
  }

  if (!error_message.empty()) {
    // One failed choice fails the request: the others are dropped.
    // Aborted by the server (it is shutting down): 503, so the client may retry elsewhere.
    error_ = rejected  ? bad_request(error_message)
             : aborted ? ApiError{503, error_message, "service_unavailable", {}, "aborted"}
                       : internal(error_message);
    loop_.abort(handle_);
    if (stream_) {
      if (anthropic_) {
        *sse_out += "event: error\ndata: " + anthropic_error_body(*error_) + "\n\n";
      } else if (responses_) {
        nlohmann::json e{
            {"type", "error"}, {"message", error_->message}, {"code", error_->code}, {"param", nullptr}};
        *sse_out += "event: error\ndata: " + dump_json(e) + "\n\n";
      } else {
        *sse_out += sse_event(error_->to_json());
        *sse_out += kSseDone;
      }
    }
    done_ = true;
    return true;
  }

  if (stream_) {
    for (size_t i = 0; i < parts.size(); ++i) {
      if (!touched[i]) continue;
      if (parts[i].text.empty() && parts[i].logprobs.empty() && parts[i].finish == FinishReason::kNone &&
          parts[i].reasoning.empty() && parts[i].tool_calls.is_null() && parts[i].function_call.is_null())
        continue;
      *sse_out += anthropic_   ? anthropic_->part(parts[i])
                  : responses_ ? responses_->part(parts[i])
                               : sse_event(chunk_json(meta_, parts[i], include_usage_, token_text_));
    }
  }
  if (n_finished_ == static_cast<int>(choices_.size())) {
    if (stream_ && anthropic_) {
      *sse_out += anthropic_->finish(choices_[0].finish, choices_[0].stop_string, completion_tokens_);
    } else if (stream_ && responses_) {
      std::vector<size_t> order;
      *sse_out += responses_->finish(responses_object(responses_->id(), meta_.model, responses_->created(),
                                                      choice_results(&order).front(),
                                                      Usage{prompt_tokens_, completion_tokens_}));
    } else if (stream_) {
      if (include_usage_)
        *sse_out += sse_event(usage_chunk_json(meta_, Usage{prompt_tokens_, completion_tokens_}));
      *sse_out += kSseDone;
    }
    done_ = true;
  }
  return done_;
}

void GenerationJob::start_choice(size_t index, TokenEvent& ev, ChunkPart* part) {
  Choice& c = choices_[index];
  c.started = true;
  const size_t prompt = index / static_cast<size_t>(candidates_);
  if (prompt >= shape_.prompts.size()) return;
  const std::vector<int32_t>& ids = shape_.prompts[prompt];
  const size_t scored = ev.prompt_scored ? std::min(ev.prompt_logprobs.size(), ids.size() - 1) : 0;
  if (prompt < shape_.echo_texts.size()) {
    const std::string& text = shape_.echo_texts[prompt];
    shape(c, text, false, part);
    c.text_offset += static_cast<int64_t>(text.size());
    if (with_logprobs_) {
      // The prompt's tokens as OpenAI echoes them: the first has no logprob (null).
      std::vector<LogprobItem>& items = part != nullptr ? part->logprobs : c.logprobs;
      LogprobItem first{ids.front(), 0.0f, {}};
      first.none = true;
      items.push_back(std::move(first));
      for (size_t p = 0; p < scored; ++p)
        items.push_back(LogprobItem{ids[p + 1], ev.prompt_logprobs[p], ev.prompt_top_logprobs[p]});
    }
  }
  if (shape_.prompt_logprobs) {
    // vLLM's shape: null for the first token, then {"<id>": {"logprob", "rank", "decoded_token"}} holding
    // the prompt's token and the top alternatives at each position.
    nlohmann::json out = nlohmann::json::array({nullptr});
    for (size_t p = 0; p < scored; ++p) {
      nlohmann::json at = nlohmann::json::object();
      for (size_t j = 0; j < ev.prompt_top_logprobs[p].size(); ++j) {
        const TopLogprob& t = ev.prompt_top_logprobs[p][j];
        at[std::to_string(t.token)] = {{"logprob", t.logprob},
                                       {"rank", static_cast<int>(j) + 1},
                                       {"decoded_token", token_text_(t.token)}};
      }
      at[std::to_string(ids[p + 1])] = {{"logprob", ev.prompt_logprobs[p]},
                                        {"rank", ev.prompt_ranks[p]},
                                        {"decoded_token", token_text_(ids[p + 1])}};
      out.push_back(std::move(at));
    }
    c.prompt_logprobs = std::move(out);
  }
}

std::string GenerationJob::final_body() const {
  if (error_) return anthropic_ ? anthropic_error_body(*error_) : error_->body();
  std::vector<size_t> order;
  std::vector<ChoiceResult> results = choice_results(&order);
  if (anthropic_)
    return dump_json(anthropic_message(anthropic_->id(), meta_.model, results.front(),
                                       choices_[order[0]].stop_string,
                                       Usage{prompt_tokens_, completion_tokens_}));
  if (responses_)
    return dump_json(responses_object(responses_->id(), meta_.model, responses_->created(), results.front(),
                                      Usage{prompt_tokens_, completion_tokens_}));
  return dump_json(response_json(meta_, results, Usage{prompt_tokens_, completion_tokens_}, token_text_));
}

std::vector<ChoiceResult> GenerationJob::choice_results(std::vector<size_t>* order_out) const {
  std::vector<ChoiceResult> results;
  // Per prompt, its candidates in order; best_of keeps the n most likely (ties: the earlier one).
  // Usage counts every candidate's tokens: they were all generated.
  std::vector<size_t>& order = *order_out;
  for (size_t first = 0; first < choices_.size(); first += candidates_) {
    order.clear();
    for (size_t i = first; i < first + candidates_; ++i) order.push_back(i);
    if (candidates_ > n_) {
      std::stable_sort(order.begin(), order.end(), [this](size_t a, size_t b) {
        return choices_[a].cumulative_logprob > choices_[b].cumulative_logprob;
      });
    }
    for (int j = 0; j < n_; ++j) {
      const Choice& c = choices_[order[j]];
      ChoiceResult res;
      res.index = static_cast<int>(results.size());
      res.text = c.text;
      res.reasoning = c.reasoning;
      res.finish = c.finish;
      res.finish_name = finish_name(c, c.finish);
      res.with_logprobs = with_logprobs_;
      res.logprobs = c.logprobs;
      res.prompt_logprobs = c.prompt_logprobs;
      if (c.tool_parser && !c.tool_parser->calls().empty()) {
        const auto& calls = c.tool_parser->calls();
        if (shape_.legacy_functions) {
          res.function_call = nlohmann::json{{"name", calls[0].name}, {"arguments", calls[0].arguments}};
        } else {
          res.tool_calls = nlohmann::json::array();
          for (const ToolCall& call : calls) {
            res.tool_calls.push_back(
                nlohmann::json{{"id", call.id},
                               {"type", "function"},
                               {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
          }
        }
      }
      results.push_back(std::move(res));
    }
  }
  return results;
}

}  // namespace nanoserve::server
