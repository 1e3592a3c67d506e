#pragma once
// The channel from the engine thread to the HTTP thread of one request.
//
// One RequestStream serves all n choices of an HTTP request, so the waiting
// thread sleeps on one condition variable. The engine thread only pushes and
// never blocks: the capacity is fixed at creation to what the request can
// produce at most (max_tokens + 1 events per choice), so a slow client costs
// memory bounded by its own request and never stalls a step.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/sampler.h"
#include "engine/stop_checker.h"

namespace nanoserve::server {

// The engine's types, not copies: FinishReason (with finish_reason_name) and
// TokenLogprob.
using nanoserve::FinishReason;
using TopLogprob = nanoserve::TokenLogprob;

struct TokenEvent {
  int choice = 0;        // which of the request's sequences
  int32_t token = -1;    // -1 on a pure finish/error event
  std::string text;      // text this token made safe to show (stop strings already cut)
  float logprob = 0.0f;  // of `token`, when logprobs were asked for
  std::vector<TopLogprob> top_logprobs;
  FinishReason finish = FinishReason::kNone;  // set on the sequence's last event
  std::string error;                          // engine failure message (finish == kError)
  bool rejected = false;                      // the engine refused the request at admission: a 400
  std::string stop_string;                    // the stop string that finished it, if any
  // Prompt logprobs (the request asked for them): on the choice's first event,
  // [prompt - 1] entries, position p scoring prompt token p + 1.
  bool prompt_scored = false;
  std::vector<float> prompt_logprobs;
  std::vector<std::vector<TopLogprob>> prompt_top_logprobs;
  std::vector<int32_t> prompt_ranks;
};

class RequestStream {
 public:
  RequestStream(int n_choices, size_t capacity) : n_choices_(n_choices), capacity_(capacity) {
    events_.reserve(64);
  }

  // Engine thread. Returns false (and drops the event) if a token event would exceed the
  // capacity; finish events always fit.
  bool push(TokenEvent event);

  // HTTP thread: moves out everything queued, waiting up to `timeout` for at
  // least one event. Returns the number of events taken.
  size_t wait_take(std::vector<TokenEvent>* out, std::chrono::milliseconds timeout);

  // Called on the engine thread after every push, under the stream's lock: it must be cheap
  // and must not call back into this stream (post a wake-up elsewhere). Empty clears it.
  void set_on_ready(std::function<void()> on_ready);

  // True once every choice has delivered its finish event (and it was taken or not).
  bool all_finished() const;
  int n_choices() const { return n_choices_; }

 private:
  const int n_choices_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TokenEvent> events_;
  std::function<void()> on_ready_;
  size_t pushed_ = 0;  // token events so far
  int finished_ = 0;
};

}  // namespace nanoserve::server
