// The regex subset (structured/regex.h): what it matches, what it refuses by
// name, the byte restrictions of a JSON string, the formats, the text
// constraint's masks against feeding each token alone, and schema strings with
// pattern / format inside the JSON automaton. Python's re is the oracle of the
// generated strings in tests/server/test_guided_fields.py.

#include "structured/regex.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/rng.h"
#include "structured/json_automaton.h"
#include "structured/regex_constraint.h"
#include "structured/schema_compiler.h"

namespace nanoserve::structured {
namespace {

std::shared_ptr<const ByteDfa> dfa(const std::string& pattern, bool json_string = false) {
  RegexOptions o;
  o.json_string = json_string;
  auto d = compile_regex(pattern, o);
  EXPECT_TRUE(d.ok()) << pattern << ": " << d.status().to_string();
  return d.ok() ? *d : nullptr;
}

struct Case {
  const char* pattern;
  std::vector<const char*> yes, no;
};

TEST(Regex, MatchesWhatPythonFullmatchMatches) {
  const std::vector<Case> cases = {
      {"abc", {"abc"}, {"ab", "abcd", ""}},
      {"^a|b$", {"a", "b"}, {"ab", ""}},
      {"a?b*c+", {"c", "abcc", "bbbc", "ac"}, {"", "ab", "aac"}},
      {"[a-c]{2,3}", {"ab", "ccc"}, {"a", "abcd", "ad"}},
      {"x{3}", {"xxx"}, {"xx", "xxxx"}},
      {"x{2,}", {"xx", "xxxxx"}, {"x"}},
      {"(ab|cd)+e", {"abe", "cdabe"}, {"e", "abcd"}},
      {"(?:ab)*", {"", "abab"}, {"aba"}},
      {"\\d{3}-\\d{4}", {"555-1234"}, {"5551234", "55-1234"}},
      {"\\w+@\\w+\\.com", {"a_1@b.com"}, {"a@b.org", "@b.com"}},
      {"[^0-9]+", {"abc", "A b"}, {"a1"}},
      {"\\.\\*\\(\\)", {".*()"}, {"ab"}},
      {"[-a]+", {"-a-"}, {"b"}},
      {"[\\d.]+", {"1.5"}, {"1,5"}},
      {"é+", {"é", "éé"}, {"e"}},
      {"a.c", {"abc", "a c"}, {"ac"}},
      {"colou?r", {"color", "colour"}, {"colouur"}},
      {"a*?b", {"b", "aab"}, {"a"}},
  };
  for (const Case& c : cases) {
    auto d = dfa(c.pattern);
    ASSERT_NE(d, nullptr);
    for (const char* s : c.yes) EXPECT_TRUE(d->matches(s)) << c.pattern << " should match '" << s << "'";
    for (const char* s : c.no) EXPECT_FALSE(d->matches(s)) << c.pattern << " should not match '" << s << "'";
  }
}

TEST(Regex, RefusesWhatIsOutsideTheSubsetByName) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"(a)\\1", "escape '\\1'"},
      {"(?=a)b", "lookaround"},
      {"(?P<x>a)", "named groups"},
      {"a\\bb", "escape '\\b'"},
      {"\\p{L}", "escape '\\p'"},
      {"a^b", "anchor '^'"},
      {"a$b", "anchor '$'"},
      {"(ab", "unbalanced '('"},
      {"ab)", "unbalanced ')'"},
      {"[ab", "unbalanced '['"},
      {"*a", "nothing to repeat"},
      {"a{2,1}", "m <= n"},
      {"a{1000}", "m <= n <= 256"},
      {"a++", "quantifier after a quantifier"},
      {"[[:alpha:]]", "POSIX classes"},
      {"[é]", "non-ASCII character in a class"},
      {"a{x}", "must be {m}, {m,} or {m,n}"},
  };
  for (const auto& [pattern, words] : cases) {
    auto d = compile_regex(pattern, RegexOptions{});
    ASSERT_FALSE(d.ok()) << pattern;
    EXPECT_NE(d.status().message().find(words), std::string::npos) << pattern << ": " << d.status().message();
  }
}

TEST(Regex, JsonStringsNeverTakeQuotesBackslashesOrControlBytes) {
  auto d = dfa("[a\"\\\\]+|x\\ny", /*json_string=*/true);
  ASSERT_NE(d, nullptr);
  EXPECT_TRUE(d->matches("aaa"));
  EXPECT_FALSE(d->matches("a\"a"));
  EXPECT_FALSE(d->matches("a\\"));
  EXPECT_FALSE(d->matches("x\ny"));  // the branch that needs a newline is gone
  RegexOptions o;
  o.json_string = true;
  auto only_quotes = compile_regex("\"+", o);
  ASSERT_FALSE(only_quotes.ok());
  EXPECT_NE(only_quotes.status().message().find("without escapes"), std::string::npos);
}

// A random walk over live transitions always reaches an accepting state: no state strands a generator.
TEST(Regex, EveryLiveStateCanFinish) {
  Rng rng(5);
  for (const char* p : {"(ab|a[0-9]{2,4})+z", "\\d{4}-\\d{2}", "([a-z]+\\.){1,3}com"}) {
    auto d = dfa(p);
    ASSERT_NE(d, nullptr);
    for (int walk = 0; walk < 200; ++walk) {
      int32_t s = d->start();
      std::string text;
      for (int step = 0; step < 64 && !(d->accepting(s) && (!d->continues(s) || rng.next_double() < 0.3));
           ++step) {
        std::vector<int> bytes;
        for (int b = 0; b < 256; ++b)
          if (d->next(s, static_cast<uint8_t>(b)) != ByteDfa::kDead) bytes.push_back(b);
        ASSERT_FALSE(bytes.empty()) << p << " stranded after '" << text << "'";
        const int b = bytes[rng.next_u64() % bytes.size()];
        text.push_back(static_cast<char>(b));
        s = d->next(s, static_cast<uint8_t>(b));
      }
      if (d->accepting(s)) {
        EXPECT_TRUE(d->matches(text)) << p << ": " << text;
      }
    }
  }
}

TEST(Regex, FormatsAcceptTheirShapes) {
  const std::vector<std::pair<const char*, std::vector<const char*>>> ok = {
      {"date", {"2024-02-28", "1999-12-01"}},
      {"time", {"23:59:59Z", "00:00:00.5+05:30"}},
      {"date-time", {"2024-01-15T10:20:30Z"}},
      {"email", {"a.b@example.com"}},
      {"uuid", {"123e4567-e89b-12d3-a456-426614174000"}},
      {"ipv4", {"192.168.0.1", "0.0.0.0", "255.255.255.255"}},
  };
  for (const auto& [format, values] : ok) {
    StatusOr<std::string> p = format_pattern(format);
    ASSERT_TRUE(p.ok()) << format;
    auto d = dfa(*p, /*json_string=*/true);
    ASSERT_NE(d, nullptr);
    for (const char* v : values) EXPECT_TRUE(d->matches(v)) << format << ": " << v;
  }
  auto ip = dfa(*format_pattern("ipv4"), true);
  EXPECT_FALSE(ip->matches("01.2.3.4"));  // Python's ipaddress refuses leading zeros
  EXPECT_FALSE(ip->matches("256.1.1.1"));
  EXPECT_FALSE(dfa(*format_pattern("date"), true)->matches("2024-02-30"));
  EXPECT_FALSE(format_pattern("hostname").ok());
}

TEST(Regex, EscapedTextMatchesItselfOnly) {
  for (const char* text : {"a.b*c", "(x|y)", "[1-2]{3}", "back\\slash", "tab\there", "$5^"}) {
    auto d = dfa(regex_escape(text));
    ASSERT_NE(d, nullptr);
    EXPECT_TRUE(d->matches(text)) << text;
    EXPECT_FALSE(d->matches(std::string(text) + "x")) << text;
  }
}

std::shared_ptr<const TokenVocab> tiny_vocab() {
  std::vector<std::string> pieces;
  for (int b = 32; b < 127; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  for (const char* p : {"ab", "abc", "12", "2024", "-0", "yes", "no", "<|end|>"}) pieces.push_back(p);
  std::vector<bool> special(pieces.size(), false);
  const int32_t eos = static_cast<int32_t>(pieces.size()) - 1;
  return std::make_shared<TokenVocab>(pieces, special, std::vector<int32_t>{eos});
}

// The trie walk's mask equals feeding each token's bytes alone, in every state a walk reaches.
TEST(RegexConstraint, MaskMatchesFeedingEachToken) {
  auto vocab = tiny_vocab();
  auto d = dfa("(ab|[0-9]{4})-(yes|no)");
  ASSERT_NE(d, nullptr);
  std::vector<int32_t> scratch;
  for (const std::string prefix : {"", "a", "ab", "20", "2024", "2024-", "ab-y", "ab-yes"}) {
    int32_t s = d->start();
    for (char c : prefix) s = d->next(s, static_cast<uint8_t>(c));
    ASSERT_NE(s, ByteDfa::kDead) << prefix;
    TokenMask m;
    compute_regex_mask(*vocab, *d, s, scratch, m);
    bool any = false;
    for (int32_t id = 0; id < vocab->size(); ++id) {
      bool want;
      if (vocab->is_eos(id)) {
        want = d->accepting(s);
      } else {
        int32_t t = s;
        for (char c : vocab->piece(id))
          if (t != ByteDfa::kDead) t = d->next(t, static_cast<uint8_t>(c));
        want = t != ByteDfa::kDead;
      }
      EXPECT_EQ(mask_has(m, id), want) << "after '" << prefix << "', token '" << vocab->piece(id) << "'";
      any |= want;
    }
    EXPECT_TRUE(any) << "an empty mask after '" << prefix << "'";
  }
}

TEST(RegexConstraint, FollowsTokensAndEndsOnlyWhenAccepted) {
  auto vocab = tiny_vocab();
  auto factory = std::make_shared<RegexConstraintFactory>(dfa("yes|no"), vocab);
  auto c = factory->start();
  std::vector<float> logits(vocab->size(), 0.0f);
  const int32_t eos = vocab->eos_ids()[0];
  c->apply(logits);
  EXPECT_FALSE(c->allows(eos));
  int32_t yes = -1;
  for (int32_t id = 0; id < vocab->size(); ++id)
    if (vocab->piece(id) == "yes") yes = id;
  EXPECT_TRUE(c->allows(yes));
  c->accept(yes);
  std::fill(logits.begin(), logits.end(), 0.0f);
  c->apply(logits);
  EXPECT_TRUE(c->allows(eos));
  for (int32_t id = 0; id < vocab->size(); ++id) {
    if (id != eos) {
      EXPECT_EQ(logits[id], -INFINITY) << vocab->piece(id);
    }
  }
}

// A schema string with a pattern: the automaton takes exactly the JSON strings whose body matches.
TEST(SchemaPattern, StringsFollowTheirPatternAndFormat) {
  auto g = compile_schema(nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{2}\\d{2}$"},
          "day":{"type":"string","format":"date"}},"required":["code","day"]})"));
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto accepts = [&](const std::string& text) {
    JsonState s(&*g);
    return s.feed(text) && s.can_finish();
  };
  EXPECT_TRUE(accepts(R"({"code": "AB12", "day": "2024-05-06"})"));
  EXPECT_FALSE(accepts(R"({"code": "ab12", "day": "2024-05-06"})"));
  EXPECT_FALSE(accepts(R"({"code": "AB123", "day": "2024-05-06"})"));
  EXPECT_FALSE(accepts(R"({"code": "AB12", "day": "2024-13-06"})"));
  EXPECT_FALSE(accepts(R"({"code": "A\u0042", "day": "2024-05-06"})"));  // no escapes in a pattern string
}

TEST(SchemaPattern, RefusalsNameTheKeywordAndPlace) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {R"j({"type":"string","pattern":"(?=x)"})j", "'pattern' at #: group syntax"},
      {R"j({"type":"string","format":"hostname"})j", "unsupported format 'hostname' at #"},
      {R"j({"type":"string","pattern":"a+","maxLength":3})j",
       "'pattern' with 'minLength' or 'maxLength' at #"},
      {R"j({"type":"string","pattern":"a","format":"date"})j", "'pattern' and 'format' together at #"},
      {R"j({"properties":{"q":{"pattern":"\"+"}}})j", "'pattern' at #/properties/q"},
  };
  for (const auto& [schema, words] : cases) {
    auto g = compile_schema(nlohmann::ordered_json::parse(schema));
    ASSERT_FALSE(g.ok()) << schema;
    EXPECT_NE(g.status().message().find(words), std::string::npos) << g.status().message();
  }
}

// Properties come out in the schema's order (an ordered_json keeps it), reason before answer.
TEST(SchemaOrder, PropertiesKeepTheSchemasOrder) {
  auto g = compile_schema(nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"reasoning":{"type":"string"},"answer":{"type":"integer"}},
          "required":["reasoning","answer"]})"));
  ASSERT_TRUE(g.ok());
  JsonState s(&*g);
  EXPECT_TRUE(s.feed(R"({"reasoning": "r", "answer": 1})"));
  EXPECT_TRUE(s.can_finish());
  JsonState t(&*g);
  EXPECT_FALSE(t.feed(R"({"answer": 1, "reasoning": "r"})"));
}

}  // namespace
}  // namespace nanoserve::structured
