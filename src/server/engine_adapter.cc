#include "server/engine_adapter.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace nanoserve::server {

namespace {

FinishReason to_server_reason(nanoserve::FinishReason r, bool failed) {
  switch (r) {
    case nanoserve::FinishReason::kNone: return FinishReason::kNone;
    case nanoserve::FinishReason::kStop: return FinishReason::kStop;
    case nanoserve::FinishReason::kLength: return FinishReason::kLength;
    case nanoserve::FinishReason::kAbort: return failed ? FinishReason::kError : FinishReason::kAbort;
  }
  return FinishReason::kNone;
}

}  // namespace

SamplingParams to_sampling_params(const GenerationParams& p, const std::vector<std::string>& stop) {
  SamplingParams s;
  s.temperature = p.temperature;
  s.top_k = p.top_k == 0 ? -1 : p.top_k;
  s.top_p = p.top_p;
  s.min_p = p.min_p;
  s.repetition_penalty = p.repetition_penalty;
  s.presence_penalty = p.presence_penalty;
  s.frequency_penalty = p.frequency_penalty;
  s.seed = p.seed;
  s.max_tokens =
      static_cast<int32_t>(std::min<int64_t>(p.max_tokens.value_or(1), std::numeric_limits<int32_t>::max()));
  s.stop = stop;
  s.ignore_eos = p.ignore_eos;
  s.logprobs = p.top_logprobs >= 0;
  s.top_logprobs = std::max(0, p.top_logprobs);
  s.n = 1;
  return s;
}

Status EngineAdapter::add_request(EngineRequest request) {
  auto id = engine_.add_request(std::move(request.prompt), to_sampling_params(request.params, request.stop));
  if (!id.ok()) return id.status();
  to_server_[*id] = request.id;
  to_engine_[request.id] = *id;
  return Status();
}

void EngineAdapter::abort(uint64_t id) {
  auto it = to_engine_.find(id);
  if (it != to_engine_.end()) engine_.abort(it->second);
}

Status EngineAdapter::step(std::vector<EngineOutput>* outputs) {
  NS_RETURN_IF_ERROR(engine_.step(outputs_));
  for (RequestOutput& o : outputs_) {
    auto it = to_server_.find(o.id);
    if (it == to_server_.end()) continue;
    const uint64_t server_id = it->second;
    const bool with_logprobs = o.logprobs.size() == o.new_tokens.size();
    // One output per token; the text and the finish ride on the last.
    for (size_t i = 0; i < o.new_tokens.size(); ++i) {
      EngineOutput e;
      e.id = server_id;
      e.token = o.new_tokens[i];
      if (with_logprobs) {
        e.logprob = o.logprobs[i];
        if (i < o.top_logprobs.size()) {
          for (const TokenLogprob& t : o.top_logprobs[i])
            e.top_logprobs.push_back(TopLogprob{t.token, t.logprob});
        }
      }
      outputs->push_back(std::move(e));
    }
    if (o.new_tokens.empty()) {
      EngineOutput e;
      e.id = server_id;
      outputs->push_back(std::move(e));
    }
    EngineOutput& last = outputs->back();
    last.text = std::move(o.text);
    last.finish = to_server_reason(o.finish_reason, !o.error.empty());
    if (!o.error.empty()) last.error = std::move(o.error);
    if (o.finished()) {
      to_engine_.erase(server_id);
      to_server_.erase(it);
    }
  }
  return Status();
}

EngineStats EngineAdapter::stats() const {
  nanoserve::EngineStats s = engine_.stats();
  EngineStats out;
  out.num_running = s.num_running;
  out.num_waiting = s.num_waiting;
  out.kv_cache_usage = s.kv_usage;
  out.num_preemptions = s.num_preemptions;
  return out;
}

}  // namespace nanoserve::server
