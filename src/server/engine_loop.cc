#include "server/engine_loop.h"

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

EngineLoop::EngineLoop(ServingEngine& engine, ServerMetrics& metrics, Options options)
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
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

StatusOr<EngineLoop::Handle> EngineLoop::submit(std::vector<EngineRequest> choices) {
  NS_CHECK(!choices.empty()) << "a request needs at least one choice";
  Handle handle;
  size_t capacity = 0;
  for (const EngineRequest& r : choices) capacity += static_cast<size_t>(r.params.max_tokens.value_or(0)) + 1;
  handle.stream = std::make_shared<RequestStream>(static_cast<int>(choices.size()), capacity);
  Clock::time_point now = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return failed_precondition("the server is shutting down");
    int64_t waiting = static_cast<int64_t>(inbox_adds_.size()) + engine_waiting_.load();
    if (waiting + static_cast<int64_t>(choices.size()) > options_.max_waiting) {
      return resource_exhausted("waiting queue is full");
    }
    for (size_t i = 0; i < choices.size(); ++i) {
      choices[i].id = next_id_++;
      handle.ids.push_back(choices[i].id);
      Tracked t{handle.stream, static_cast<int>(i), now, now, false};
      inbox_adds_.push_back(Pending{std::move(choices[i]), std::move(t)});
    }
  }
  cv_.notify_all();
  return handle;
}

void EngineLoop::abort(const Handle& handle) {
  if (handle.stream == nullptr || handle.stream->all_finished()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_aborts_.insert(inbox_aborts_.end(), handle.ids.begin(), handle.ids.end());
  }
  cv_.notify_all();
}

void EngineLoop::run() {
  outputs_.reserve(1024);
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stopping_ || !inbox_adds_.empty() || !inbox_aborts_.empty() || engine_.has_unfinished();
      });
      if (stopping_) break;
    }
    drain_inbox();
    if (engine_.has_unfinished()) {
      outputs_.clear();
      Status s = engine_.step(&outputs_);
      num_steps_.fetch_add(1);
      // Gauges first: a client that reacts to its token must already see this step's queue.
      update_gauges();
      if (!s.ok()) {
        NS_LOG(ERROR) << "engine step failed: " << s.to_string();
        fail_all(s.message());
      } else {
        handle_outputs(outputs_);
      }
    }
    update_gauges();
  }
  // Shutting down: nothing more will run.
  drain_inbox();
  std::vector<uint64_t> ids;
  for (const auto& [id, t] : tracked_) ids.push_back(id);
  for (uint64_t id : ids) {
    engine_.abort(id);
    finish(id, FinishReason::kAbort);
  }
  update_gauges();
}

void EngineLoop::drain_inbox() {
  std::vector<Pending> adds;
  std::vector<uint64_t> aborts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Count the new requests as waiting until the next step says otherwise,
    // so submit() never sees them in neither place.
    engine_waiting_.fetch_add(static_cast<int64_t>(inbox_adds_.size()));
    adds.swap(inbox_adds_);
    aborts.swap(inbox_aborts_);
  }
  for (Pending& p : adds) {
    uint64_t id = p.request.id;
    int64_t prompt_len = static_cast<int64_t>(p.request.prompt.size());
    tracked_.emplace(id, std::move(p.tracked));
    Status s = engine_.add_request(std::move(p.request));
    if (!s.ok()) {
      finish(id, FinishReason::kError, s.message(), /*rejected=*/true);
      continue;
    }
    metrics_.prompt_tokens_total.inc(static_cast<double>(prompt_len));
  }
  for (uint64_t id : aborts) {
    if (tracked_.count(id) == 0) continue;  // finished meanwhile
    engine_.abort(id);
    finish(id, FinishReason::kAbort);
  }
}

void EngineLoop::handle_outputs(const std::vector<EngineOutput>& outputs) {
  Clock::time_point now = Clock::now();
  for (const EngineOutput& out : outputs) {
    auto it = tracked_.find(out.id);
    if (it == tracked_.end()) continue;
    Tracked& t = it->second;
    if (out.token >= 0) {
      metrics_.generation_tokens_total.inc();
      if (!t.has_token) {
        metrics_.time_to_first_token_seconds.observe(seconds_between(t.arrival, now));
      } else {
        metrics_.inter_token_latency_seconds.observe(seconds_between(t.last_token, now));
      }
      t.has_token = true;
      t.last_token = now;
      TokenEvent ev;
      ev.choice = t.choice;
      ev.token = out.token;
      ev.text = out.text;
      ev.logprob = out.logprob;
      ev.top_logprobs = out.top_logprobs;
      bool fits = t.stream->push(std::move(ev));
      NS_CHECK(fits) << "request " << out.id << " produced more tokens than its max_tokens";
    } else if (!out.text.empty()) {
      // Held-back text released at the finish, with no new token.
      TokenEvent ev;
      ev.choice = t.choice;
      ev.text = out.text;
      t.stream->push(std::move(ev));
    }
    if (out.finish != FinishReason::kNone) finish(out.id, out.finish, out.error);
  }
}

void EngineLoop::finish(uint64_t id, FinishReason reason, const std::string& error, bool rejected) {
  auto it = tracked_.find(id);
  if (it == tracked_.end()) return;
  Tracked& t = it->second;
  metrics_.e2e_request_latency_seconds.observe(seconds_between(t.arrival, Clock::now()));
  metrics_.request_finished(reason);
  TokenEvent ev;
  ev.choice = t.choice;
  ev.finish = reason;
  ev.error = error;
  ev.rejected = rejected;
  t.stream->push(std::move(ev));
  tracked_.erase(it);
}

void EngineLoop::fail_all(const std::string& message) {
  std::vector<uint64_t> ids;
  for (const auto& [id, t] : tracked_) ids.push_back(id);
  for (uint64_t id : ids) {
    engine_.abort(id);
    finish(id, FinishReason::kError, "engine error: " + message);
  }
}

void EngineLoop::update_gauges() {
  EngineStats s = engine_.stats();
  int64_t inbox;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox = static_cast<int64_t>(inbox_adds_.size());
  }
  engine_waiting_.store(s.num_waiting);
  metrics_.num_requests_running.set(static_cast<double>(s.num_running));
  metrics_.num_requests_waiting.set(static_cast<double>(s.num_waiting + inbox));
  metrics_.kv_cache_usage_perc.set(s.kv_cache_usage);
  double delta = static_cast<double>(s.num_preemptions) - metrics_.num_preemptions_total.value();
  if (delta > 0) metrics_.num_preemptions_total.inc(delta);
}

}  // namespace nanoserve::server
