#include "server/parse_budget.h"

#include <utility>

#include "core/check.h"

namespace nanoserve::server {

ParseBudget::Lease::Lease(Lease&& other) noexcept
    : budget_(std::exchange(other.budget_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

ParseBudget::Lease& ParseBudget::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    release();
    budget_ = std::exchange(other.budget_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void ParseBudget::Lease::release() {
  if (budget_ != nullptr) std::exchange(budget_, nullptr)->give_back(bytes_);
  bytes_ = 0;
}

ParseBudget::ParseBudget(Options options) : options_(options) {
  NS_CHECK(options_.small_reserve_bytes < options_.capacity_bytes)
      << "parse budget of " << options_.capacity_bytes << " bytes leaves no room beside its reserve of "
      << options_.small_reserve_bytes;
}

bool ParseBudget::fits(size_t body_bytes) const {
  const size_t limit = body_bytes <= options_.small_body_bytes ? options_.capacity_bytes : max_body_bytes();
  return in_use_ + body_bytes <= limit;
}

ParseBudget::Lease ParseBudget::acquire(size_t body_bytes) {
  if (body_bytes > max_body_bytes()) return Lease();
  std::unique_lock<std::mutex> lock(mu_);
  if (!freed_.wait_for(lock, options_.max_wait, [&] { return fits(body_bytes); })) return Lease();
  in_use_ += body_bytes;
  return Lease(this, body_bytes);
}

size_t ParseBudget::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

void ParseBudget::give_back(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    NS_CHECK(bytes <= in_use_) << "parse budget released " << bytes << " bytes, only " << in_use_
                               << " in use";
    in_use_ -= bytes;
  }
  freed_.notify_all();
}

}  // namespace nanoserve::server
