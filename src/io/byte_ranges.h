#pragma once
// Overlap check for the byte ranges a model file assigns to its tensors. Every
// file reader (GGUF, safetensors) runs it after its bounds checks: two tensors
// that share bytes are a corrupt file, never two valid views of one buffer.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>

namespace nanoserve {

struct ByteRange {
  uint64_t begin = 0;  // first byte
  uint64_t end = 0;    // one past the last byte; begin == end is empty
};

// Two indices into `ranges` whose ranges share at least one byte, the one that
// begins first (or, at equal begins, is listed first) as `first`; nullopt when
// the ranges are pairwise disjoint. Empty ranges share no byte with anything.
// O(n log n) time, O(n) memory: sorted by begin, a range that overlaps any
// other overlaps its sorted neighbour. PRECOND: begin <= end for each range.
struct Overlap {
  size_t first;
  size_t second;
};
std::optional<Overlap> find_overlap(std::span<const ByteRange> ranges);

}  // namespace nanoserve
