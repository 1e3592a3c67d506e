#pragma once
// SwapSpace: the host-side bookkeeping of the swap area (docs/kvcache.md,
// "Swapping"), owned by the scheduler beside the block manager. The area has
// num_slots slots of one KV block each; the runner holds the bytes
// (ModelRunner::init_swap_space), addressed by the slot ids handed out here.
// A slot is free or held by exactly one swapped-out sequence.
//
// Slots are handed out lowest id first, so a sequence's slots are usually
// consecutive, as its blocks usually are: a runner copies each run of
// consecutive (block, slot) pairs in one call.
// Nothing here allocates after construction.

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace nanoserve {

class SwapSpace {
 public:
  // PRECOND: num_slots >= 0 (0: no swap area; every allocation fails).
  explicit SwapSpace(int32_t num_slots);

  int32_t num_slots() const { return num_slots_; }
  int32_t num_free_slots() const { return num_free_; }
  int32_t num_used_slots() const { return num_slots_ - num_free_; }
  bool is_used(int32_t slot) const;

  // n slots, lowest ids first, appended to `out`; false (changing nothing) when fewer than n are free.
  bool allocate(int32_t n, std::vector<int32_t>& out);
  // Gives the slots back. PRECOND: each is used (NS_CHECK).
  void free(std::span<const int32_t> slots);

  // The used slots recounted against the counter and `expected_used` (the
  // slots the swapped-out sequences hold); INTERNAL naming the first disagreement. For tests.
  Status check_invariants(int64_t expected_used) const;

 private:
  int32_t num_slots_ = 0, num_free_ = 0;
  int32_t first_free_ = 0;     // no free slot below it
  std::vector<uint8_t> used_;  // [num_slots]
};

}  // namespace nanoserve
