#pragma once
// Numbers in the JSON automaton: a kNumber frame read digit by digit, each
// digit taken only when the integer part can still end inside the node's
// range (docs/structured_output.md, "Numbers").
//
// Frame fields: phase (below, in json_number.cc), bits = magnitude of the
// integer part, esc = negative, count = integer digits, aux = fraction or
// exponent digits. A fresh frame (all zero) is at the start.

#include <cstdint>

#include "structured/grammar.h"
#include "structured/json_automaton.h"

namespace nanoserve::structured {

// Consumes b into the number when it continues it; false leaves f as it was.
bool number_step(const Grammar& g, Frame& f, uint8_t b);
// The number read so far is a whole value in range (it may end here).
bool number_complete(const Grammar& g, const Frame& f);

}  // namespace nanoserve::structured
