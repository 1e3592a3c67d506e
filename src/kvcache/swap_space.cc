#include "kvcache/swap_space.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace nanoserve {

SwapSpace::SwapSpace(int32_t num_slots) : num_slots_(num_slots), num_free_(num_slots) {
  NS_CHECK(num_slots >= 0) << "swap space of " << num_slots << " slots";
  used_.assign(static_cast<size_t>(num_slots), 0);
}

bool SwapSpace::is_used(int32_t slot) const {
  NS_CHECK(slot >= 0 && slot < num_slots_) << "swap slot " << slot << " outside [0, " << num_slots_ << ")";
  return used_[slot] != 0;
}

bool SwapSpace::allocate(int32_t n, std::vector<int32_t>& out) {
  NS_CHECK(n >= 0) << "allocate " << n << " swap slots";
  if (n > num_free_) return false;
  int32_t s = first_free_;
  for (int32_t i = 0; i < n; ++i, ++s) {
    while (used_[s]) ++s;  // num_free_ >= n, so a free slot lies ahead
    used_[s] = 1;
    out.push_back(s);
  }
  num_free_ -= n;
  // Every slot below s is now used, or was skipped because it was used.
  first_free_ = s;
  while (first_free_ < num_slots_ && used_[first_free_]) ++first_free_;
  return true;
}

void SwapSpace::free(std::span<const int32_t> slots) {
  for (int32_t s : slots) {
    NS_CHECK(is_used(s)) << "free of free swap slot " << s;
    used_[s] = 0;
    first_free_ = std::min(first_free_, s);
  }
  num_free_ += static_cast<int32_t>(slots.size());
}

Status SwapSpace::check_invariants(int64_t expected_used) const {
  int64_t used = 0;
  for (int32_t s = 0; s < num_slots_; ++s) {
    used += used_[s];
    if (!used_[s] && s < first_free_)
      return internal_error("swap space: slot " + std::to_string(s) + " is free below the first free hint");
  }
  if (used != num_slots_ - num_free_)
    return internal_error("swap space: " + std::to_string(used) + " slots used, the counter says " +
                          std::to_string(num_slots_ - num_free_));
  if (used != expected_used)
    return internal_error("swap space: " + std::to_string(used) +
                          " slots used, the swapped-out sequences hold " + std::to_string(expected_used));
  return Status();
}

}  // namespace nanoserve
