#include "kvcache/block_manager.h"

#include <algorithm>
#include <limits>
#include <string>

#include "core/check.h"

namespace nanoserve {

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

Status BlockManagerConfig::validate() const {
  if (num_blocks < 1) return invalid_argument("num_blocks must be >= 1, got " + std::to_string(num_blocks));
  if (block_size < 1 || block_size > 4096)
    return invalid_argument("block_size " + std::to_string(block_size) + " outside [1, 4096]");
  if (max_num_seqs < 1)
    return invalid_argument("max_num_seqs must be >= 1, got " + std::to_string(max_num_seqs));
  if (max_seq_len < 1)
    return invalid_argument("max_seq_len must be >= 1, got " + std::to_string(max_seq_len));
  if (sliding_window < 0)
    return invalid_argument("sliding_window must be >= 0, got " + std::to_string(sliding_window));
  if (window_read_margin < 0)
    return invalid_argument("window_read_margin must be >= 0, got " + std::to_string(window_read_margin));
  // Slots are int32 (slot_mapping), so the pool must have fewer than 2^31 of them.
  if (static_cast<int64_t>(num_blocks) * block_size > std::numeric_limits<int32_t>::max()) {
    return invalid_argument("num_blocks: " + std::to_string(num_blocks) + " blocks of " +
                            std::to_string(block_size) + " tokens exceed 2^31 slots");
  }
  return Status();
}

BlockManager::BlockManager(const BlockManagerConfig& c) {
  const Status st = c.validate();
  NS_CHECK(st.ok()) << st.to_string();
  num_blocks_ = c.num_blocks;
  block_size_ = c.block_size;
  max_num_seqs_ = c.max_num_seqs;
  max_seq_len_ = std::min<int64_t>(c.max_seq_len, static_cast<int64_t>(c.num_blocks) * c.block_size);
  max_blocks_per_seq_ = static_cast<int32_t>(ceil_div(max_seq_len_, block_size_));
  prefix_caching_ = c.enable_prefix_caching;
  window_ = c.sliding_window;
  window_margin_ = c.window_read_margin;

  ref_counts_.assign(num_blocks_, 0);
  free_list_.reserve(num_blocks_);
  for (int32_t b = num_blocks_ - 1; b >= 0; --b) free_list_.push_back(b);  // block 0 first
  block_hash_.assign(num_blocks_, kNoHash);
  block_parent_.assign(num_blocks_, kNoHash);
  lru_prev_.assign(num_blocks_, -1);
  lru_next_.assign(num_blocks_, -1);
  if (prefix_caching_) {
    block_tokens_.assign(static_cast<size_t>(num_blocks_) * block_size_, 0);
    uint64_t cap = 2;
    while (cap < 2 * static_cast<uint64_t>(num_blocks_)) cap <<= 1;
    map_keys_.assign(cap, kNoHash);
    map_blocks_.assign(cap, -1);
    map_mask_ = cap - 1;
  }

  const size_t cells = static_cast<size_t>(max_num_seqs_) * max_blocks_per_seq_;
  tables_.assign(cells, -1);
  seq_hashes_.assign(cells, kNoHash);
  n_blocks_.assign(max_num_seqs_, 0);
  n_released_.assign(max_num_seqs_, 0);
  lens_.assign(max_num_seqs_, 0);
  n_hashed_.assign(max_num_seqs_, 0);
  live_.assign(max_num_seqs_, 0);
  free_handles_.reserve(max_num_seqs_);
  for (int32_t s = max_num_seqs_ - 1; s >= 0; --s) free_handles_.push_back(s);
}

// ---- Blocks ----

int32_t BlockManager::ref_count(int32_t block) const {
  NS_CHECK(block >= 0 && block < num_blocks_)
      << "block id " << block << " outside [0, " << num_blocks_ << ")";
  return ref_counts_[block];
}

bool BlockManager::is_cached(int32_t block) const {
  NS_CHECK(block >= 0 && block < num_blocks_)
      << "block id " << block << " outside [0, " << num_blocks_ << ")";
  return block_hash_[block] != kNoHash;
}

void BlockManager::lru_push_back(int32_t b) {
  lru_prev_[b] = lru_tail_;
  lru_next_[b] = -1;
  if (lru_tail_ >= 0) {
    lru_next_[lru_tail_] = b;
  } else {
    lru_head_ = b;
  }
  lru_tail_ = b;
  ++num_evictable_;
}

void BlockManager::lru_remove(int32_t b) {
  const int32_t p = lru_prev_[b], n = lru_next_[b];
  if (p >= 0) {
    lru_next_[p] = n;
  } else {
    lru_head_ = n;
  }
  if (n >= 0) {
    lru_prev_[n] = p;
  } else {
    lru_tail_ = p;
  }
  lru_prev_[b] = lru_next_[b] = -1;
  --num_evictable_;
}

int32_t BlockManager::take_block() {
  int32_t b;
  if (!free_list_.empty()) {
    b = free_list_.back();
    free_list_.pop_back();
  } else {
    NS_CHECK(lru_head_ >= 0) << "no block to take after an availability check";
    b = lru_head_;
    lru_remove(b);
    map_erase(block_hash_[b]);
    block_hash_[b] = kNoHash;
    --num_cached_;
    ++num_evictions_;
  }
  ref_counts_[b] = 1;
  ++num_in_use_;
  return b;
}

void BlockManager::release(int32_t b) {
  NS_CHECK(ref_counts_[b] > 0) << "release of free block " << b;
  if (--ref_counts_[b] > 0) return;
  --num_in_use_;
  if (block_hash_[b] != kNoHash) {
    lru_push_back(b);
  } else {
    free_list_.push_back(b);
  }
}

// ---- Hash table ----

uint64_t BlockManager::block_hash(uint64_t parent, const TokenSeq& tokens, int64_t begin, int64_t n) {
  uint64_t h = mix(parent ^ 0x9e3779b97f4a7c15ull);
  for (int64_t i = 0; i < n; ++i)
    h = mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(tokens[begin + i])) + 1));
  return h | 1;  // never kNoHash
}

int64_t BlockManager::map_find(uint64_t h) const {
  for (uint64_t i = mix(h) & map_mask_;; i = (i + 1) & map_mask_) {
    if (map_keys_[i] == h) return static_cast<int64_t>(i);
    if (map_keys_[i] == kNoHash) return -1;
  }
}

void BlockManager::map_insert(uint64_t h, int32_t block) {
  uint64_t i = mix(h) & map_mask_;
  while (map_keys_[i] != kNoHash) i = (i + 1) & map_mask_;
  map_keys_[i] = h;
  map_blocks_[i] = block;
}

void BlockManager::map_erase(uint64_t h) {
  const int64_t found = map_find(h);
  NS_CHECK(found >= 0) << "cached block's hash missing from the table";
  // Backward-shift deletion: move later entries of the probe run into the hole.
  uint64_t hole = static_cast<uint64_t>(found);
  for (uint64_t j = (hole + 1) & map_mask_; map_keys_[j] != kNoHash; j = (j + 1) & map_mask_) {
    const uint64_t home = mix(map_keys_[j]) & map_mask_;
    // Entry j may fill the hole if its home is not in (hole, j] cyclically.
    const bool in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!in_range) {
      map_keys_[hole] = map_keys_[j];
      map_blocks_[hole] = map_blocks_[j];
      hole = j;
    }
  }
  map_keys_[hole] = kNoHash;
  map_blocks_[hole] = -1;
}

int32_t BlockManager::find_cached(uint64_t h, uint64_t parent, const TokenSeq& tokens, int64_t begin) const {
  const int64_t slot = map_find(h);
  if (slot < 0) return -1;
  const int32_t b = map_blocks_[slot];
  // The 64-bit hash decides; the tokens and the parent are checked so that a
  // collision within one block can never return wrong K/V.
  if (block_parent_[b] != parent) return -1;
  const int32_t* bt = block_tokens_.data() + static_cast<int64_t>(b) * block_size_;
  for (int64_t i = 0; i < block_size_; ++i) {
    if (bt[i] != tokens[begin + i]) return -1;
  }
  return b;
}

// ---- Sequences ----

void BlockManager::check_live(int32_t seq, const char* what) const {
  NS_CHECK(seq >= 0 && seq < max_num_seqs_ && live_[seq]) << what << " of unknown sequence handle " << seq;
}

bool BlockManager::is_live(int32_t seq) const {
  return seq >= 0 && seq < max_num_seqs_ && live_[seq];
}

StatusOr<int32_t> BlockManager::add_sequence() {
  if (free_handles_.empty())
    return resource_exhausted("block manager: all " + std::to_string(max_num_seqs_) + " sequences in use");
  const int32_t seq = free_handles_.back();
  free_handles_.pop_back();
  live_[seq] = 1;
  n_blocks_[seq] = 0;
  n_released_[seq] = 0;
  lens_[seq] = 0;
  n_hashed_[seq] = 0;
  return seq;
}

void BlockManager::free_sequence(int32_t seq) {
  check_live(seq, "free_sequence");
  int32_t* r = row(seq);
  for (int32_t i = n_blocks_[seq] - 1; i >= n_released_[seq]; --i) {
    release(r[i]);
    r[i] = -1;
  }
  n_blocks_[seq] = 0;
  n_released_[seq] = 0;
  lens_[seq] = 0;
  n_hashed_[seq] = 0;
  live_[seq] = 0;
  free_handles_.push_back(seq);
}

int64_t BlockManager::seq_len(int32_t seq) const {
  check_live(seq, "seq_len");
  return lens_[seq];
}

int64_t BlockManager::seq_capacity(int32_t seq) const {
  check_live(seq, "seq_capacity");
  return static_cast<int64_t>(n_blocks_[seq]) * block_size_;
}

std::span<const int32_t> BlockManager::block_table(int32_t seq) const {
  check_live(seq, "block_table");
  return {row(seq), static_cast<size_t>(n_blocks_[seq])};
}

int32_t BlockManager::num_released(int32_t seq) const {
  check_live(seq, "num_released");
  return n_released_[seq];
}

int32_t BlockManager::num_held_blocks(int32_t seq) const {
  check_live(seq, "num_held_blocks");
  return n_blocks_[seq] - n_released_[seq];
}

// ---- Sliding windows ----

int32_t BlockManager::releasable_blocks(int64_t next_pos) const {
  if (window_ <= 0) return 0;
  // The first position any query at >= next_pos reads: its window's start, less the margin.
  const int64_t first_read = next_pos + 1 - window_ - window_margin_;
  return first_read > 0 ? static_cast<int32_t>(first_read / block_size_) : 0;
}

void BlockManager::release_behind_window(int32_t seq) {
  const int32_t target = std::min(releasable_blocks(lens_[seq]), n_blocks_[seq]);
  int32_t* r = row(seq);
  // Newest first: the older block goes on the LRU list later, so a cached prefix outlives what follows it.
  for (int32_t i = target - 1; i >= n_released_[seq]; --i) {
    release(r[i]);
    r[i] = -1;
    ++num_window_releases_;
  }
  n_released_[seq] = std::max(n_released_[seq], target);
}

// ---- Prefix cache ----

int64_t BlockManager::cached_prefix_len(const TokenSeq& tokens) const {
  if (!prefix_caching_ || num_cached_ == 0) return 0;
  const int64_t max_blocks = std::min<int64_t>((tokens.size() - 1) / block_size_, max_blocks_per_seq_);
  uint64_t parent = kNoHash;
  int64_t i = 0;
  for (; i < max_blocks; ++i) {
    const int64_t begin = i * block_size_;
    const uint64_t h = block_hash(parent, tokens, begin, block_size_);
    if (find_cached(h, parent, tokens, begin) < 0) break;
    parent = h;
  }
  return i * block_size_;
}

int64_t BlockManager::attach_cached_prefix(int32_t seq, const TokenSeq& tokens) {
  check_live(seq, "attach_cached_prefix");
  NS_CHECK(n_blocks_[seq] == 0) << "attach_cached_prefix to a sequence that holds blocks";
  if (!prefix_caching_ || num_cached_ == 0) return 0;
  const int64_t max_blocks = std::min<int64_t>((tokens.size() - 1) / block_size_, max_blocks_per_seq_);
  uint64_t parent = kNoHash;
  int32_t* r = row(seq);
  uint64_t* hashes = seq_hashes_.data() + static_cast<int64_t>(seq) * max_blocks_per_seq_;
  int32_t n = 0;
  for (; n < max_blocks; ++n) {
    const int64_t begin = static_cast<int64_t>(n) * block_size_;
    const uint64_t h = block_hash(parent, tokens, begin, block_size_);
    const int32_t b = find_cached(h, parent, tokens, begin);
    if (b < 0) break;
    if (ref_counts_[b] == 0) {
      lru_remove(b);
      ++num_in_use_;
    }
    ++ref_counts_[b];
    r[n] = b;
    hashes[n] = h;
    parent = h;
  }
  n_blocks_[seq] = n;
  n_hashed_[seq] = n;
  lens_[seq] = static_cast<int64_t>(n) * block_size_;
  release_behind_window(seq);
  return lens_[seq];
}

// ---- Growth ----

int32_t BlockManager::blocks_needed(int32_t seq, int64_t n_tokens) const {
  check_live(seq, "blocks_needed");
  const int64_t need = ceil_div(n_tokens, block_size_) - n_blocks_[seq];
  return need > 0 ? static_cast<int32_t>(std::min<int64_t>(need, std::numeric_limits<int32_t>::max())) : 0;
}

bool BlockManager::can_reserve(int32_t seq, int64_t n_tokens) const {
  return n_tokens <= max_seq_len_ && blocks_needed(seq, n_tokens) <= num_available_blocks();
}

Status BlockManager::reserve(int32_t seq, int64_t n_tokens) {
  check_live(seq, "reserve");
  if (n_tokens > max_seq_len_) {
    return invalid_argument("block manager: sequence of " + std::to_string(n_tokens) +
                            " tokens exceeds max_seq_len " + std::to_string(max_seq_len_));
  }
  const int32_t need = blocks_needed(seq, n_tokens);
  if (need > num_available_blocks()) {
    return resource_exhausted("block manager: " + std::to_string(need) + " blocks needed, " +
                              std::to_string(num_available_blocks()) + " available");
  }
  int32_t* r = row(seq);
  for (int32_t i = 0; i < need; ++i) r[n_blocks_[seq]++] = take_block();
  return Status();
}

void BlockManager::commit(int32_t seq, const TokenSeq& tokens, int64_t new_len) {
  check_live(seq, "commit");
  NS_CHECK(new_len >= lens_[seq] && new_len <= seq_capacity(seq) && tokens.size() >= new_len)
      << "commit of " << new_len << " tokens to a sequence of " << lens_[seq] << " with room for "
      << seq_capacity(seq) << " (" << tokens.size() << " tokens known)";
  lens_[seq] = new_len;
  if (prefix_caching_) hash_full_blocks(seq, tokens);
  release_behind_window(seq);  // after hashing: a released block can still enter the cache
}

void BlockManager::hash_full_blocks(int32_t seq, const TokenSeq& tokens) {
  const int32_t full = static_cast<int32_t>(lens_[seq] / block_size_);
  const int32_t* r = row(seq);
  uint64_t* hashes = seq_hashes_.data() + static_cast<int64_t>(seq) * max_blocks_per_seq_;
  for (int32_t i = n_hashed_[seq]; i < full; ++i) {
    const uint64_t parent = i > 0 ? hashes[i - 1] : kNoHash;
    const int64_t begin = static_cast<int64_t>(i) * block_size_;
    const uint64_t h = block_hash(parent, tokens, begin, block_size_);
    hashes[i] = h;
    const int32_t b = r[i];
    // Released behind the window (a restored sequence: its chain is rebuilt over them), already
    // cached, or another block is.
    if (b < 0 || block_hash_[b] != kNoHash || map_find(h) >= 0) continue;
    block_hash_[b] = h;
    block_parent_[b] = parent;
    int32_t* bt = block_tokens_.data() + static_cast<int64_t>(b) * block_size_;
    for (int64_t j = 0; j < block_size_; ++j) bt[j] = tokens[begin + j];
    map_insert(h, b);
    ++num_cached_;
  }
  n_hashed_[seq] = std::max(n_hashed_[seq], full);
}

void BlockManager::shrink_to(int32_t seq, int64_t new_len) {
  check_live(seq, "shrink_to");
  NS_CHECK(new_len >= 0 && new_len <= lens_[seq])
      << "shrink_to " << new_len << " tokens of a sequence of " << lens_[seq];
  NS_CHECK(new_len >= static_cast<int64_t>(n_hashed_[seq]) * block_size_)
      << "shrink_to " << new_len << " tokens would cut a hashed block (" << n_hashed_[seq] << " of "
      << block_size_ << ")";
  NS_CHECK(releasable_blocks(new_len) >= n_released_[seq])
      << "shrink_to " << new_len << " tokens needs blocks released behind the window (" << n_released_[seq]
      << " released)";
  lens_[seq] = new_len;
  const int32_t keep = static_cast<int32_t>(ceil_div(new_len, block_size_));
  int32_t* r = row(seq);
  for (int32_t i = n_blocks_[seq] - 1; i >= keep; --i) {
    release(r[i]);
    r[i] = -1;
  }
  n_blocks_[seq] = std::min(n_blocks_[seq], keep);
}

// ---- Swapping ----

int32_t BlockManager::held_blocks_for(int64_t len) const {
  const int64_t table = ceil_div(len, block_size_);
  return static_cast<int32_t>(table - std::min<int64_t>(releasable_blocks(len), table));
}

Status BlockManager::restore_sequence(int32_t seq, const TokenSeq& tokens, int64_t len) {
  check_live(seq, "restore_sequence");
  NS_CHECK(n_blocks_[seq] == 0 && lens_[seq] == 0) << "restore_sequence into a sequence that holds blocks";
  NS_CHECK(len >= 0 && tokens.size() >= len)
      << "restore of " << len << " tokens, " << tokens.size() << " known";
  if (len > max_seq_len_) {
    return invalid_argument("block manager: restore of " + std::to_string(len) +
                            " tokens exceeds max_seq_len " + std::to_string(max_seq_len_));
  }
  const int32_t held = held_blocks_for(len);
  if (held > num_available_blocks()) {
    return resource_exhausted("block manager: " + std::to_string(held) + " blocks needed, " +
                              std::to_string(num_available_blocks()) + " available");
  }
  const int32_t table = static_cast<int32_t>(ceil_div(len, block_size_));
  int32_t* r = row(seq);
  const int32_t released = table - held;
  for (int32_t i = 0; i < released; ++i) r[i] = -1;
  for (int32_t i = released; i < table; ++i) r[i] = take_block();
  n_blocks_[seq] = table;
  n_released_[seq] = released;
  lens_[seq] = len;
  n_hashed_[seq] = 0;
  if (prefix_caching_) hash_full_blocks(seq, tokens);
  return Status();
}

// ---- The step ----

void BlockManager::fill_batch(ForwardBatch& batch) const {
  const int32_t B = batch.num_seqs(), T = batch.num_tokens();
  // The stride: the longest table of the step, rounded up to a power of two (a runner may key
  // captured work on it, so few strides recur), not max_seq_len's: a step sends what it reads.
  int32_t longest = 1;
  for (int32_t b = 0; b < B; ++b) {
    check_live(batch.seq_ids[b], "fill_batch");
    longest = std::max(longest, n_blocks_[batch.seq_ids[b]]);
  }
  int32_t stride = 1;
  while (stride < longest) stride *= 2;
  stride = std::min(stride, max_blocks_per_seq_);
  batch.max_blocks_per_seq = stride;
  batch.block_tables.resize(static_cast<size_t>(B) * stride);
  batch.slot_mapping.resize(T);
  for (int32_t b = 0; b < B; ++b) {
    const int32_t seq = batch.seq_ids[b];
    const int32_t* r = row(seq);
    int32_t* dst = batch.block_tables.data() + static_cast<int64_t>(b) * stride;
    std::copy(r, r + stride, dst);  // -1 past the table's end
    const int32_t rel = n_released_[seq];
    if (rel > 0) {
      // No kernel reads a released entry (each starts at most its margin before the window), but the
      // batch's table must hold pool ids: the sequence's oldest held block, one no other sequence writes.
      NS_CHECK(rel < n_blocks_[seq]) << "sequence " << seq << " in a step holds no block";
      std::fill(dst, dst + rel, r[rel]);
    }
    for (int32_t t = batch.seq_starts[b]; t < batch.seq_starts[b + 1]; ++t) {
      const int32_t p = batch.positions[t];
      NS_CHECK(p >= static_cast<int64_t>(rel) * block_size_ && p < n_blocks_[seq] * block_size_)
          << "position " << p << " outside the held blocks [" << rel << ", " << n_blocks_[seq]
          << ") of sequence " << seq;
      batch.slot_mapping[t] = r[p / block_size_] * block_size_ + p % block_size_;
    }
  }
}

// ---- Checks ----

Status BlockManager::check_invariants() const {
  auto fail = [](const std::string& what) { return internal_error("block manager: " + what); };
  if (num_free_blocks() + num_in_use_ + num_evictable_ != num_blocks_) {
    return fail("free " + std::to_string(num_free_blocks()) + " + in use " + std::to_string(num_in_use_) +
                " + evictable " + std::to_string(num_evictable_) + " != total " +
                std::to_string(num_blocks_));
  }
  std::vector<int32_t> holders(num_blocks_, 0), state(num_blocks_, 0);  // state: 1 free, 2 evictable
  for (int32_t b : free_list_) {
    if (state[b] != 0) return fail("block " + std::to_string(b) + " twice on the free list");
    state[b] = 1;
  }
  int32_t n_lru = 0;
  for (int32_t b = lru_head_; b >= 0; b = lru_next_[b]) {
    if (state[b] != 0 || ++n_lru > num_blocks_) return fail("LRU list revisits block " + std::to_string(b));
    state[b] = 2;
  }
  if (n_lru != num_evictable_) return fail("LRU list length disagrees with the evictable count");
  for (int32_t s = 0; s < max_num_seqs_; ++s) {
    if (!live_[s]) continue;
    const std::string seq = "sequence " + std::to_string(s);
    if (lens_[s] > static_cast<int64_t>(n_blocks_[s]) * block_size_)
      return fail(seq + " is longer than its blocks");
    // Exactly the blocks behind its window are released: none it still reads, none it no longer needs.
    if (n_released_[s] != std::min(releasable_blocks(lens_[s]), n_blocks_[s])) {
      return fail(seq + " of " + std::to_string(lens_[s]) + " tokens released " +
                  std::to_string(n_released_[s]) + " blocks behind its window, not " +
                  std::to_string(releasable_blocks(lens_[s])));
    }
    for (int32_t i = 0; i < n_blocks_[s]; ++i) {
      const int32_t b = row(s)[i];
      if ((i < n_released_[s]) != (b < 0)) {
        return fail(seq + " table entry " + std::to_string(i) + " is " + std::to_string(b) + " with " +
                    std::to_string(n_released_[s]) + " released");
      }
      if (b >= 0) ++holders[b];
    }
  }
  int32_t in_use = 0, cached = 0;
  for (int32_t b = 0; b < num_blocks_; ++b) {
    if (holders[b] != ref_counts_[b]) {
      return fail("block " + std::to_string(b) + " is in " + std::to_string(holders[b]) +
                  " tables but has reference count " + std::to_string(ref_counts_[b]));
    }
    if (ref_counts_[b] > 0 && state[b] != 0) return fail("block " + std::to_string(b) + " in use and listed");
    if (ref_counts_[b] == 0 && state[b] == 0) return fail("block " + std::to_string(b) + " lost");
    if (state[b] == 1 && block_hash_[b] != kNoHash)
      return fail("free block " + std::to_string(b) + " is cached");
    if (state[b] == 2 && block_hash_[b] == kNoHash)
      return fail("evictable block " + std::to_string(b) + " is not cached");
    in_use += ref_counts_[b] > 0 ? 1 : 0;
    if (block_hash_[b] != kNoHash) {
      ++cached;
      const int64_t slot = map_find(block_hash_[b]);
      if (slot < 0 || map_blocks_[slot] != b)
        return fail("cached block " + std::to_string(b) + " not in the table");
    }
  }
  if (in_use != num_in_use_) return fail("in-use count disagrees with reference counts");
  if (cached != num_cached_) return fail("cached count disagrees with the blocks");
  int32_t entries = 0;
  for (uint64_t k : map_keys_) entries += k != kNoHash ? 1 : 0;
  if (entries != num_cached_) return fail("hash table holds " + std::to_string(entries) + " entries");
  return Status();
}

}  // namespace nanoserve
