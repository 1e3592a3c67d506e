#pragma once
// A byte-level pushdown automaton for the JSON values of one Grammar.
//
// The state is a small set of threads (more than one only while an anyOf is
// undecided); each thread is a stack of frames, one per value being read. A
// byte is accepted when at least one thread can take it; a thread only takes
// a byte after which its value can still be finished (bounds, depth, required
// keys are checked on every byte), so a live state always has a way to end.
// The state is plain data: copying it is copying two small arrays, and key()
// serialises it for the mask cache.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "structured/grammar.h"

namespace nanoserve::structured {

enum class FrameKind : uint8_t { kValue, kObject, kArray, kString, kKey, kLiteral, kNumber };

// One value being read. The fields' meaning depends on kind (json_automaton.cc);
// 32 bytes with no padding, so a frame is its own cache key.
struct Frame {
  int32_t node = 0;
  FrameKind kind = FrameKind::kValue;
  uint8_t phase = 0;
  uint8_t esc = 0;   // string: escape phase; number: negative; key: other keys still possible
  uint8_t utf8 = 0;  // string / key: continuation bytes still expected, and their range
  int32_t count = 0;
  int32_t aux = 0;
  uint64_t bits = 0;
  uint64_t bits2 = 0;
};
static_assert(sizeof(Frame) == 32);

class JsonState {
 public:
  // The start: one thread expecting a value of the grammar's root.
  explicit JsonState(const Grammar* grammar);

  const Grammar& grammar() const { return *g_; }
  bool dead() const { return ws_.empty(); }
  int32_t num_threads() const { return static_cast<int32_t>(ws_.size()); }
  // Whether the value read so far is complete (end of output may come now).
  bool can_finish() const;
  // The state as bytes: equal keys, equal states (the mask cache's key).
  void key(std::string& out) const;

  // Advances `in` by one byte into `out` (which may not be `in`); returns !out.dead().
  static bool step(const JsonState& in, uint8_t byte, JsonState& out);
  // Advances this state in place over `bytes`; false (state dead) when one is refused.
  bool feed(std::string_view bytes);

  static constexpr int32_t kMaxThreads = 16;

 private:
  friend class ThreadStepper;
  const Grammar* g_;
  std::vector<Frame> frames_;  // every thread's stack, bottom first, thread after thread
  std::vector<int32_t> ends_;  // [threads] end of each thread's frames in frames_
  std::vector<int32_t> ws_;    // [threads] length of the current whitespace run
};

}  // namespace nanoserve::structured
