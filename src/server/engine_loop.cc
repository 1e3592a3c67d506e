#include "server/engine_loop.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "core/check.h"
#include "core/logging.h"

namespace nanoserve::server {

using Clock = std::chrono::steady_clock;

namespace {
double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

EngineLoop::EngineLoop(Engine& engine, ServerMetrics& metrics, Options options)
    : engine_(engine), metrics_(metrics), options_(options), stats_log_(options.log_stats_interval_s) {
  metrics_.set_max_model_len(engine_.max_model_len());
}

EngineLoop::~EngineLoop() {
  stop();
}

void EngineLoop::start() {
  NS_CHECK(!thread_.joinable()) << "engine loop started twice";
  thread_ = std::thread([this] { run(); });
}

void EngineLoop::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_flag_.store(true);
  if (thread_.joinable()) thread_.join();
  // Nothing more will run: end what is still held.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = tracked_.begin(); it != tracked_.end();) {
    engine_.abort(it->first);
    Tracked t = std::move(it->second);
    it = tracked_.erase(it);
    metrics_.request_finished(FinishReason::kAbort);
    TokenEvent ev;
    ev.choice = t.choice;
    ev.finish = FinishReason::kAbort;
    t.stream->push(std::move(ev));
  }
}

StatusOr<EngineLoop::Handle> EngineLoop::submit(std::vector<EngineRequest> choices) {
  NS_CHECK(!choices.empty()) << "a request needs at least one choice";
  Handle handle;
  size_t capacity = 0;
  for (const EngineRequest& r : choices) capacity += static_cast<size_t>(r.params.max_tokens) + 1;
  handle.stream = std::make_shared<RequestStream>(static_cast<int>(choices.size()), capacity);
  const Clock::time_point now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return failed_precondition("the server is shutting down");
  if (static_cast<int64_t>(choices.size()) > options_.max_waiting) {
    // Never admissible, however long the client waits: not a 429.
    return invalid_argument("the request needs " + std::to_string(choices.size()) +
                            " sequences, more than the " + std::to_string(options_.max_waiting) +
                            " the waiting queue can ever hold (--max-waiting-requests)");
  }
  if (engine_.stats().num_waiting + static_cast<int64_t>(choices.size()) > options_.max_waiting)
    return resource_exhausted("waiting queue is full");
  auto tally = std::make_shared<RequestTally>();
  for (size_t i = 0; i < choices.size(); ++i) {
    const int64_t prompt_len = static_cast<int64_t>(choices[i].prompt.size());
    StatusOr<RequestId> id = engine_.add_request(std::move(choices[i].prompt), choices[i].params);
    if (!id.ok()) {
      handle.ids.push_back(0);
      metrics_.request_finished(FinishReason::kError);
      TokenEvent ev;
      ev.choice = static_cast<int>(i);
      ev.finish = FinishReason::kError;
      ev.error = id.status().message();
      ev.rejected = true;
      handle.stream->push(std::move(ev));
      continue;
    }
    handle.ids.push_back(*id);
    tracked_.emplace(*id, Tracked{handle.stream, static_cast<int>(i), now, tally});
    ++tally->unfinished;
    metrics_.prompt_tokens_total.inc(static_cast<double>(prompt_len));
  }
  return handle;
}

void EngineLoop::abort(const Handle& handle) {
  if (handle.stream == nullptr || handle.stream->all_finished()) return;
  for (RequestId id : handle.ids) {
    if (id != 0) engine_.abort(id);  // finished ids are ignored by the Engine
  }
}

void EngineLoop::run() {
  outputs_.reserve(1024);
  while (!stop_flag_.load()) {
    if (!engine_.wait_for_work(std::chrono::milliseconds(50))) {
      stats_log_.tick(Clock::now(), engine_.stats());  // the interval that went idle gets its line
      continue;
    }
    const Status s = engine_.step(outputs_);
    num_steps_.fetch_add(1);
    // Gauges first: a client that reacts to its token must already see this step's queue.
    update_gauges();
    // A failed step finished its own requests with kError (in outputs_); the rest carry on.
    if (!s.ok()) {
      NS_LOG(ERROR) << "engine step failed: " << s.to_string();
    }
    handle_outputs(outputs_);
    stats_log_.tick(Clock::now(), engine_.stats());
  }
}

namespace {

void take_prompt_logprobs(const RequestOutput& o, TokenEvent& ev) {
  if (o.prompt_ranks.empty()) return;
  ev.prompt_scored = true;
  ev.prompt_logprobs = o.prompt_logprobs;
  ev.prompt_top_logprobs = o.prompt_top_logprobs;
  ev.prompt_ranks = o.prompt_ranks;
}

}  // namespace

void EngineLoop::handle_outputs(const std::vector<RequestOutput>& outputs) {
  const Clock::time_point now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  for (const RequestOutput& o : outputs) {
    auto it = tracked_.find(o.id);
    if (it == tracked_.end()) continue;
    Tracked& t = it->second;
    const bool with_logprobs = o.logprobs.size() == o.new_tokens.size();
    for (size_t i = 0; i < o.new_tokens.size(); ++i) {
      metrics_.generation_tokens_total.inc();
      if (o.num_output_tokens - static_cast<int32_t>(o.new_tokens.size() - i) == 0) {
        metrics_.time_to_first_token_seconds.observe(seconds_between(o.arrival_time, now));
      } else {
        const double itl = seconds_between(t.last_token, now);
        metrics_.inter_token_latency_seconds.observe(itl);
        metrics_.time_per_output_token_seconds.observe(itl);
      }
      t.last_token = now;
      TokenEvent ev;
      ev.choice = t.choice;
      ev.token = o.new_tokens[i];
      if (with_logprobs) {
        ev.logprob = o.logprobs[i];
        if (i < o.top_logprobs.size()) ev.top_logprobs = o.top_logprobs[i];
      }
      if (i + 1 == o.new_tokens.size()) ev.text = o.text;  // the step's text rides on its last token
      if (i == 0) take_prompt_logprobs(o, ev);
      const bool fits = t.stream->push(std::move(ev));
      NS_CHECK(fits) << "request " << o.id << " produced more tokens than its max_tokens";
    }
    if (o.new_tokens.empty() && !o.prompt_ranks.empty()) {
      // A request that generates nothing (max_tokens 0): its prompt's scores come alone.
      TokenEvent ev;
      ev.choice = t.choice;
      take_prompt_logprobs(o, ev);
      t.stream->push(std::move(ev));
    }
    if (o.new_tokens.empty() && !o.text.empty()) {
      // Held-back text released at the finish, with no new token.
      TokenEvent ev;
      ev.choice = t.choice;
      ev.text = o.text;
      t.stream->push(std::move(ev));
    }
    if (o.finished()) {
      observe_finished(t, o, now);
      finish_locked(t, o,
                    o.finish_reason == FinishReason::kError ? "engine error: " + o.error : std::string());
      tracked_.erase(it);
    }
  }
}

void EngineLoop::finish_locked(Tracked& t, const RequestOutput& o, const std::string& error) {
  metrics_.request_finished(o.finish_reason);
  TokenEvent ev;
  ev.choice = t.choice;
  ev.finish = o.finish_reason;
  ev.error = error;
  ev.stop_string = o.stop_string;
  t.stream->push(std::move(ev));
}

void EngineLoop::observe_finished(Tracked& t, const RequestOutput& o, Clock::time_point now) {
  // vLLM's intervals: queued (arrival -> first scheduled), prefill (-> first token), decode
  // (-> last token); inference is prefill + decode.
  metrics_.e2e_request_latency_seconds.observe(seconds_between(o.arrival_time, now));
  const bool scheduled = o.first_scheduled_time != Clock::time_point{};
  if (scheduled)
    metrics_.request_queue_time_seconds.observe(seconds_between(o.arrival_time, o.first_scheduled_time));
  if (scheduled && o.num_output_tokens > 0) {
    metrics_.request_prefill_time_seconds.observe(
        seconds_between(o.first_scheduled_time, o.first_token_time));
    metrics_.request_decode_time_seconds.observe(seconds_between(o.first_token_time, now));
    metrics_.request_inference_time_seconds.observe(seconds_between(o.first_scheduled_time, now));
  }
  metrics_.observe_request_tokens(o.num_prompt_tokens, o.num_output_tokens);
  RequestTally& tally = *t.tally;
  tally.max_generation_tokens = std::max<int64_t>(tally.max_generation_tokens, o.num_output_tokens);
  if (--tally.unfinished == 0) metrics_.observe_max_generation_tokens(tally.max_generation_tokens);
}

void EngineLoop::update_gauges() {
  const EngineStats s = engine_.stats();
  metrics_.num_requests_running.set(static_cast<double>(s.num_running));
  metrics_.num_requests_waiting.set(static_cast<double>(s.num_waiting));
  metrics_.kv_cache_usage_perc.set(s.kv_usage);
  // The Engine's counters are cumulative; the metrics advance by what is new.
  auto advance = [](Counter& c, int64_t now, int64_t& last) {
    if (now > last) c.inc(static_cast<double>(now - last));
    last = now;
  };
  advance(metrics_.num_preemptions_total, s.num_preemptions, last_preemptions_);
  metrics_.num_requests_swapped.set(static_cast<double>(s.num_swapped));
  metrics_.cpu_cache_usage_perc.set(
      s.num_swap_slots > 0 ? static_cast<double>(s.num_used_swap_slots) / s.num_swap_slots : 0.0);
  advance(metrics_.num_preemptions_swapped_total, s.num_swap_preemptions, last_swap_preemptions_);
  advance(metrics_.swapped_out_blocks_total, s.swapped_out_blocks, last_swapped_out_blocks_);
  advance(metrics_.swapped_in_blocks_total, s.swapped_in_blocks, last_swapped_in_blocks_);
  advance(metrics_.recomputed_tokens_total, s.recomputed_tokens, last_recomputed_tokens_);
  advance(metrics_.prefix_cache_queries_total, s.prefix_cache_queries, last_prefix_queries_);
  advance(metrics_.prefix_cache_hits_total, s.prefix_cache_hits, last_prefix_hits_);
  metrics_.prefix_cache_hit_rate.set(
      s.prefix_cache_queries > 0 ? static_cast<double>(s.prefix_cache_hits) / s.prefix_cache_queries : 0.0);
  if (metrics_.spec_decode_num_drafts != nullptr) {
    advance(*metrics_.spec_decode_num_drafts, s.spec_num_drafts, last_spec_drafts_);
    advance(*metrics_.spec_decode_num_draft_tokens, s.spec_num_draft_tokens, last_spec_draft_tokens_);
    advance(*metrics_.spec_decode_num_accepted_tokens, s.spec_num_accepted_tokens, last_spec_accepted_);
    const size_t k =
        std::min(s.spec_accepted_per_pos.size(), metrics_.spec_decode_num_accepted_tokens_per_pos.size());
    last_spec_per_pos_.resize(k, 0);
    for (size_t j = 0; j < k; ++j)
      advance(*metrics_.spec_decode_num_accepted_tokens_per_pos[j], s.spec_accepted_per_pos[j],
              last_spec_per_pos_[j]);
  }
}

}  // namespace nanoserve::server
