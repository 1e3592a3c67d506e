#include "server/request_stream.h"

namespace nanoserve::server {

bool RequestStream::push(TokenEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Finish events (at most one per choice) always fit; tokens are capped.
    if (event.finish == FinishReason::kNone) {
      if (pushed_ >= capacity_) return false;
      ++pushed_;
    } else {
      ++finished_;
    }
    events_.push_back(std::move(event));
    if (on_ready_) on_ready_();
  }
  cv_.notify_one();
  return true;
}

void RequestStream::set_on_ready(std::function<void()> on_ready) {
  std::lock_guard<std::mutex> lock(mu_);
  on_ready_ = std::move(on_ready);
}

size_t RequestStream::wait_take(std::vector<TokenEvent>* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  size_t n = events_.size();
  for (TokenEvent& e : events_) out->push_back(std::move(e));
  events_.clear();
  return n;
}

bool RequestStream::all_finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_ >= n_choices_;
}

}  // namespace nanoserve::server
