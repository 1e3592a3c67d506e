#pragma once
// BlockAllocator: owns the ids of a fixed number of KV blocks. A free list
// makes allocate and free O(1); a reference count per block lets several
// sequences share a block (a common prefix): the block returns to the free
// list when its last holder frees it.
//
// Running out of blocks is a normal event the scheduler reacts to (preempt),
// so allocate() reports it. Freeing a block that is already free, or an id
// outside the pool, is a bug in the caller and aborts (NS_CHECK): it is
// always detected, never silent.

#include <cstdint>
#include <optional>
#include <vector>

namespace nanoserve {

class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_list_.size()); }
  int32_t num_used() const { return num_blocks() - num_free(); }

  // A free block with reference count 1, or nullopt when none is left.
  std::optional<int32_t> allocate();
  // Adds a holder to an allocated block (prefix sharing).
  void incref(int32_t block);
  // Drops one holder; the block is free again when the count reaches zero.
  // Returns true when it did.
  bool free(int32_t block);

  int32_t ref_count(int32_t block) const;

 private:
  void check_id(int32_t block, const char* what) const;

  std::vector<int32_t> free_list_;   // stack of free ids; the next allocate takes the back
  std::vector<int32_t> ref_counts_;  // [num_blocks]; 0 = free
};

}  // namespace nanoserve
