#include "engine/stop_checker.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/rng.h"

namespace nanoserve {
namespace {

constexpr int32_t kEos = 2;
constexpr int32_t kImEnd = 7;
const std::vector<int32_t> kEosIds{kEos, kImEnd};

SamplingParams with_stops(std::vector<std::string> stops, int32_t max_tokens = 100) {
  SamplingParams p;
  p.stop = std::move(stops);
  p.max_tokens = max_tokens;
  return p;
}

// Feeds text pieces as tokens 100, 101, ... and returns what was emitted.
struct Fed {
  std::string emitted;
  FinishReason reason = FinishReason::kNone;
  int tokens = 0;
};
Fed feed(StopChecker& c, const std::vector<std::string>& pieces) {
  Fed f;
  for (const std::string& piece : pieces) {
    ++f.tokens;
    f.reason = c.on_token(100 + f.tokens, f.tokens, piece, f.emitted);
    if (f.reason != FinishReason::kNone) break;
  }
  return f;
}

TEST(StopChecker, EndTokensStopAndDropTheirText) {
  for (int32_t end : {kEos, kImEnd}) {
    StopChecker c(SamplingParams{}, kEosIds);
    std::string out;
    EXPECT_EQ(c.on_token(5, 1, "Hi", out), FinishReason::kNone);
    EXPECT_EQ(c.on_token(end, 2, "</s>", out), FinishReason::kStop);
    EXPECT_EQ(out, "Hi");
    EXPECT_EQ(c.matched_token(), end);
  }
}

TEST(StopChecker, MinTokensDefersEndTokensAndStopStrings) {
  SamplingParams p = with_stops({"xy"});
  p.min_tokens = 3;
  p.stop_token_ids = {9};
  StopChecker c(p, kEosIds);
  std::string out;
  EXPECT_EQ(c.on_token(kEos, 1, "", out), FinishReason::kNone) << "an end token before min_tokens";
  EXPECT_EQ(c.on_token(101, 2, "axyb", out), FinishReason::kNone) << "a stop string before min_tokens";
  EXPECT_EQ(c.on_token(9, 3, "c", out), FinishReason::kStop) << "the third token may end it";
  EXPECT_EQ(out, "axyb") << "the end token's own text is dropped";
}

TEST(StopChecker, StopStringEndedBeforeMinTokensDoesNotCountLater) {
  // "ab" is held whole inside the held prefix "xab" of "xabz" before min_tokens; it must not
  // finish the request once min_tokens is reached, but "xabz" ending in new text does.
  SamplingParams p = with_stops({"ab", "xabz"});
  p.min_tokens = 2;
  StopChecker c(p, kEosIds);
  std::string out;
  EXPECT_EQ(c.on_token(101, 1, "xab", out), FinishReason::kNone);
  EXPECT_EQ(c.on_token(102, 2, "q", out), FinishReason::kNone);
  EXPECT_EQ(out, "xabq");
  StopChecker d(p, kEosIds);
  out.clear();
  EXPECT_EQ(d.on_token(101, 1, "xab", out), FinishReason::kNone);
  EXPECT_EQ(d.on_token(102, 2, "z!", out), FinishReason::kStop);
  EXPECT_EQ(d.matched_stop(), "xabz");
  EXPECT_EQ(out, "");
}

TEST(StopChecker, IgnoreEosKeepsGoingButStopTokenIdsStillStop) {
  SamplingParams p;
  p.ignore_eos = true;
  p.stop_token_ids = {9};
  StopChecker c(p, kEosIds);
  std::string out;
  EXPECT_EQ(c.on_token(kEos, 1, "a", out), FinishReason::kNone);
  EXPECT_EQ(c.on_token(kImEnd, 2, "b", out), FinishReason::kNone);
  EXPECT_EQ(c.on_token(9, 3, "c", out), FinishReason::kStop);
  EXPECT_EQ(out, "ab");
}

TEST(StopChecker, MaxTokensFinishesWithLengthAndEmitsItsText) {
  StopChecker c(with_stops({}, 3), kEosIds);
  Fed f = feed(c, {"a", "b", "c", "d"});
  EXPECT_EQ(f.reason, FinishReason::kLength);
  EXPECT_EQ(f.tokens, 3);
  EXPECT_EQ(f.emitted, "abc");
}

TEST(StopChecker, EosOnTheLastAllowedTokenIsStopNotLength) {
  StopChecker c(with_stops({}, 2), kEosIds);
  std::string out;
  EXPECT_EQ(c.on_token(5, 1, "a", out), FinishReason::kNone);
  EXPECT_EQ(c.on_token(kEos, 2, "", out), FinishReason::kStop);
}

TEST(StopChecker, StopStringInsideOneTokenIsCutAndNotEmitted) {
  StopChecker c(with_stops({"wor"}), kEosIds);
  Fed f = feed(c, {"Hello world", "never"});
  EXPECT_EQ(f.reason, FinishReason::kStop);
  EXPECT_EQ(f.tokens, 1);
  EXPECT_EQ(f.emitted, "Hello ");
  EXPECT_EQ(c.matched_stop(), "wor");
}

TEST(StopChecker, StopStringSpanningTokens) {
  StopChecker c(with_stops({"STOP"}), kEosIds);
  std::string out;
  EXPECT_EQ(c.on_token(11, 1, "abc S", out), FinishReason::kNone);
  EXPECT_EQ(out, "abc ") << "'S' could start the stop string: held back";
  EXPECT_EQ(c.held(), "S");
  EXPECT_EQ(c.on_token(12, 2, "TO", out), FinishReason::kNone);
  EXPECT_EQ(out, "abc ");
  EXPECT_EQ(c.held(), "STO");
  EXPECT_EQ(c.on_token(13, 3, "P tail", out), FinishReason::kStop);
  EXPECT_EQ(out, "abc ");
}

TEST(StopChecker, HeldTextIsReleasedWhenItCannotBecomeAStop) {
  StopChecker c(with_stops({"abc"}), kEosIds);
  std::string out;
  EXPECT_EQ(c.on_token(11, 1, "xa", out), FinishReason::kNone);
  EXPECT_EQ(out, "x");
  EXPECT_EQ(c.on_token(12, 2, "b", out), FinishReason::kNone);
  EXPECT_EQ(out, "x");
  EXPECT_EQ(c.on_token(13, 3, "d", out), FinishReason::kNone);
  EXPECT_EQ(out, "xabd");
  EXPECT_EQ(c.held(), "");
}

TEST(StopChecker, HeldTextIsFlushedOnLengthAndOnEos) {
  {
    StopChecker c(with_stops({"abc"}, 2), kEosIds);
    Fed f = feed(c, {"x", "ab"});
    EXPECT_EQ(f.reason, FinishReason::kLength);
    EXPECT_EQ(f.emitted, "xab");
  }
  {
    StopChecker c(with_stops({"abc"}), kEosIds);
    std::string out;
    c.on_token(11, 1, "xab", out);
    EXPECT_EQ(out, "x");
    EXPECT_EQ(c.on_token(kEos, 2, "", out), FinishReason::kStop);
    EXPECT_EQ(out, "xab");
  }
}

TEST(StopChecker, OverlappingPrefixes) {
  StopChecker c(with_stops({"aab"}), kEosIds);
  Fed f = feed(c, {"a", "a", "a", "b", "z"});
  EXPECT_EQ(f.reason, FinishReason::kStop);
  EXPECT_EQ(f.tokens, 4);
  EXPECT_EQ(f.emitted, "a");
}

TEST(StopChecker, EarliestOfSeveralStopsWins) {
  StopChecker c(with_stops({"world", "lo w", "o"}), kEosIds);
  Fed f = feed(c, {"hel", "lo world"});
  EXPECT_EQ(f.emitted, "hel");
  EXPECT_EQ(c.matched_stop(), "lo w");
}

// Property: over random texts cut into random tokens, the emitted text is
// exactly the text before the first stop occurrence, and the request stops
// on the token that completes it.
TEST(StopChecker, RandomTokenisationsMatchWholeTextSearch) {
  Rng gen(99);
  const std::string alphabet = "ab c";
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<std::string> stops;
    const int n_stops = 1 + static_cast<int>(gen.next_u64() % 3);
    for (int i = 0; i < n_stops; ++i) {
      std::string s;
      const int len = 1 + static_cast<int>(gen.next_u64() % 4);
      for (int j = 0; j < len; ++j) s += alphabet[gen.next_u64() % alphabet.size()];
      stops.push_back(s);
    }
    std::vector<std::string> pieces;
    std::string text;
    const int n_pieces = 1 + static_cast<int>(gen.next_u64() % 12);
    for (int i = 0; i < n_pieces; ++i) {
      std::string piece;
      const int len = static_cast<int>(gen.next_u64() % 4);
      for (int j = 0; j < len; ++j) piece += alphabet[gen.next_u64() % alphabet.size()];
      pieces.push_back(piece);
      text += piece;
    }
    size_t first = std::string::npos;
    for (const std::string& s : stops) first = std::min(first, text.find(s));
    StopChecker c(with_stops(stops, n_pieces), kEosIds);
    Fed f = feed(c, pieces);
    if (first == std::string::npos) {
      EXPECT_EQ(f.reason, FinishReason::kLength) << "trial " << trial;
      EXPECT_EQ(f.emitted, text) << "trial " << trial;
    } else {
      EXPECT_EQ(f.reason, FinishReason::kStop) << "trial " << trial;
      EXPECT_EQ(f.emitted, text.substr(0, first)) << "trial " << trial;
      // It stopped on the first token whose text completes a stop string.
      std::string seen;
      int expect_tokens = 0;
      for (const std::string& piece : pieces) {
        seen += piece;
        ++expect_tokens;
        bool done = false;
        for (const std::string& s : stops) done = done || seen.find(s) != std::string::npos;
        if (done) break;
      }
      EXPECT_EQ(f.tokens, expect_tokens) << "trial " << trial;
    }
  }
}

}  // namespace
}  // namespace nanoserve
