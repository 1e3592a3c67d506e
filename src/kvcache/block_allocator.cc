#include "kvcache/block_allocator.h"

#include "core/check.h"

namespace nanoserve {

BlockAllocator::BlockAllocator(int32_t num_blocks) {
  NS_CHECK(num_blocks >= 0) << "num_blocks " << num_blocks;
  ref_counts_.assign(num_blocks, 0);
  free_list_.reserve(num_blocks);
  // Pushed in reverse so that a fresh allocator hands out 0, 1, 2, ...
  for (int32_t i = num_blocks - 1; i >= 0; --i) free_list_.push_back(i);
}

void BlockAllocator::check_id(int32_t block, const char* what) const {
  NS_CHECK(block >= 0 && block < num_blocks())
      << what << " of unknown block " << block << " (pool of " << num_blocks() << ")";
}

std::optional<int32_t> BlockAllocator::allocate() {
  if (free_list_.empty()) return std::nullopt;
  const int32_t block = free_list_.back();
  free_list_.pop_back();
  NS_CHECK_EQ(ref_counts_[block], 0) << "free list held an allocated block " << block;
  ref_counts_[block] = 1;
  return block;
}

void BlockAllocator::incref(int32_t block) {
  check_id(block, "incref");
  NS_CHECK(ref_counts_[block] > 0) << "incref of free block " << block;
  ++ref_counts_[block];
}

bool BlockAllocator::free(int32_t block) {
  check_id(block, "free");
  NS_CHECK(ref_counts_[block] > 0) << "double free of block " << block;
  if (--ref_counts_[block] > 0) return false;
  free_list_.push_back(block);
  return true;
}

int32_t BlockAllocator::ref_count(int32_t block) const {
  check_id(block, "ref_count");
  return ref_counts_[block];
}

}  // namespace nanoserve
