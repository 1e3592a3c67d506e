#pragma once
// Greedy choice: out[r] = argmax over logits[r, :].
//   logits: [R, V] f32; out: [R]
// The rule (exact, so any reduction order gives the same answer):
//  - the largest value wins, ties go to the LOWEST index (as the sampler's
//    greedy rule: "the first id holding the max"); -0 and +0 tie;
//  - NaN never wins: it compares below every number, -inf included;
//  - a row with no number (all NaN) gives V - 1, which is what the sampler's
//    scan returns there (no id equals a NaN max, so it runs to the end).
// On rows without NaN, and on all-NaN rows, this is the sampler's greedy
// result. On a row that mixes NaN and numbers the sampler's 16-lane max drops
// the values before a NaN in the same lane, so its answer depends on where the
// NaN sits; that is an artifact, not a rule, and is not copied here.

#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace nanoserve {

void argmax_ref(const Tensor& logits, std::span<int32_t> out);

}  // namespace nanoserve
