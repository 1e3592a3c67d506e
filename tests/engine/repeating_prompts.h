#pragma once
// Prompts for the speculative decoding tests: a random motif of 4-8 token ids
// repeated three times (n-gram lookup finds matches), every other prompt with
// a third of its tokens redrawn (fewer matches). Ids below 49152, the default
// model's vocabulary.

#include <cstdint>
#include <vector>

#include "engine/rng.h"

namespace nanoserve::testing {

inline std::vector<std::vector<int32_t>> repeating_prompts(int n, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> motif(4 + rng.next_u64() % 5);
    for (int32_t& t : motif) t = static_cast<int32_t>(rng.next_u64() % 49152);
    std::vector<int32_t> p;
    for (int rep = 0; rep < 3; ++rep) p.insert(p.end(), motif.begin(), motif.end());
    if (i % 2 == 1) {
      for (int32_t& t : p)
        if (rng.next_u64() % 3 == 0) t = static_cast<int32_t>(rng.next_u64() % 49152);
    }
    prompts.push_back(p);
  }
  return prompts;
}

}  // namespace nanoserve::testing
