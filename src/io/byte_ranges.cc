#include "io/byte_ranges.h"

#include <algorithm>
#include <vector>

namespace nanoserve {

std::optional<Overlap> find_overlap(std::span<const ByteRange> ranges) {
  std::vector<size_t> order;
  order.reserve(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i].end) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (ranges[a].begin != ranges[b].begin) return ranges[a].begin < ranges[b].begin;
    return a < b;
  });
  // If ranges p < q (in sorted order) overlap, then begin[p+1] <= begin[q] <
  // end[p]: p also overlaps its neighbour, so checking neighbours finds every
  // set of ranges that has an overlap.
  for (size_t k = 1; k < order.size(); ++k) {
    if (ranges[order[k]].begin < ranges[order[k - 1]].end) return Overlap{order[k - 1], order[k]};
  }
  return std::nullopt;
}

}  // namespace nanoserve
