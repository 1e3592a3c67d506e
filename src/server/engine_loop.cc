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
    : engine_(engine), metrics_(metrics), options_(options) {}

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
  for (size_t i = 0; i < choices.size(); ++i) {
    const int64_t prompt_len = static_cast<int64_t>(choices[i].prompt.size());
    StatusOr<RequestId> id = engine_.add_request(std::move(choices[i].prompt),
                                                 choices[i].params);
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
    tracked_.emplace(*id, Tracked{handle.stream, static_cast<int>(i), now});
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
    if (!engine_.wait_for_work(std::chrono::milliseconds(50))) continue;
    const Status s = engine_.step(outputs_);
    num_steps_.fetch_add(1);
    // Gauges first: a client that reacts to its token must already see this step's queue.
    update_gauges();
    // A failed step finished its own requests with kError (in outputs_); the rest carry on.
    if (!s.ok()) {
      NS_LOG(ERROR) << "engine step failed: " << s.to_string();
    }
    handle_outputs(outputs_);
  }
}

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
        metrics_.inter_token_latency_seconds.observe(seconds_between(t.last_token, now));
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
      const bool fits = t.stream->push(std::move(ev));
      NS_CHECK(fits) << "request " << o.id << " produced more tokens than its max_tokens";
    }
    if (o.new_tokens.empty() && !o.text.empty()) {
      // Held-back text released at the finish, with no new token.
      TokenEvent ev;
      ev.choice = t.choice;
      ev.text = o.text;
      t.stream->push(std::move(ev));
    }
    if (o.finished()) {
      finish_locked(o.id, t, o.finish_reason, o.arrival_time,
                    o.finish_reason == FinishReason::kError ? "engine error: " + o.error : std::string(),
                    o.stop_string);
      tracked_.erase(it);
    }
  }
}

void EngineLoop::finish_locked(RequestId, Tracked& t, FinishReason reason, Clock::time_point arrival,
                               const std::string& error, const std::string& stop_string) {
  metrics_.e2e_request_latency_seconds.observe(seconds_between(arrival, Clock::now()));
  metrics_.request_finished(reason);
  TokenEvent ev;
  ev.choice = t.choice;
  ev.finish = reason;
  ev.error = error;
  ev.stop_string = stop_string;
  t.stream->push(std::move(ev));
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
