#include "template/chat_template.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "tokenizer/default_tokenizer.h"
#include "tokenizer/tiny_vocab.h"

namespace nanoserve {
namespace {

// tests/fixtures/template/NAME.
std::string template_fixture(const std::string& name) {
  std::ifstream f(std::string(NS_SOURCE_DIR "/tests/fixtures/template/") + name, std::ios::binary);
  EXPECT_TRUE(f.good()) << "missing fixture " << name;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

nlohmann::json fixture() {
  return nlohmann::json::parse(template_fixture("chat_template.json"));
}

// Renderings by jinja2 (make_chat_template_fixture.py), byte for byte.
TEST(ChatTemplate, RendersLikeJinja) {
  auto j = fixture();
  size_t n = 0;
  for (const auto& c : j["cases"]) {
    std::string name = c["template"].get<std::string>();
    auto tmpl = ChatTemplate::parse(j["templates"][name].get<std::string>());
    ASSERT_TRUE(tmpl.ok()) << name << ": " << tmpl.status().to_string();
    std::vector<ChatMessage> messages;
    for (const auto& m : c["messages"]) messages.push_back({m["role"], m["content"]});
    auto text = tmpl->render(messages, c["add_generation_prompt"].get<bool>());
    ASSERT_TRUE(text.ok()) << text.status().to_string();
    EXPECT_EQ(*text, c["rendered"].get<std::string>()) << name << " with " << c["messages"].dump();
    ++n;
  }
  EXPECT_GE(n, 30u);
}

// Templates the ChatML recogniser used to refuse (and replace by ChatML) now render as written
// (tests/template/test_chat_template_conformance.py holds their output against jinja2's).
TEST(ChatTemplate, RendersTemplatesThatAreNotChatMl) {
  auto j = fixture();
  const std::vector<ChatMessage> msgs = {{"user", "Hi"}};
  size_t n = 0;
  for (const auto& t : j["not_chatml"]) {
    auto tmpl = ChatTemplate::parse(t.get<std::string>(), {"<s>", "</s>"});
    ASSERT_TRUE(tmpl.ok()) << t.get<std::string>() << ": " << tmpl.status().to_string();
    auto text = tmpl->render(msgs, true);
    ASSERT_TRUE(text.ok()) << text.status().to_string();
    if (t.get<std::string>().find("<|im_start|>") != std::string::npos) {
      EXPECT_NE(text->find("<|im_start|>user\nHi<|im_end|>"), std::string::npos) << *text;
    }
    ++n;
  }
  EXPECT_GE(n, 4u);
}

TEST(ChatTemplate, SyntaxErrorsNameLineAndColumn) {
  auto t = ChatTemplate::parse("{% for m in messages %}\n{{ m.content }\n{% endfor %}");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("line 2, column"), std::string::npos) << t.status().message();
  auto u = ChatTemplate::parse("{% for m in messages %}{{ m }}");
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.status().message().find("endfor"), std::string::npos) << u.status().message();
}

TEST(ChatTemplate, RenderErrorsNameLineAndColumn) {
  auto t = ChatTemplate::parse("ok\n  {{ raise_exception('roles must alternate') }}");
  ASSERT_TRUE(t.ok());
  auto text = t->render(std::vector<ChatMessage>{{"user", "x"}}, true);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().message(),
            "chat template: line 2, column 6: raise_exception: roles must alternate");
}

TEST(ChatTemplate, ModelWithoutTemplateIsRefusedNotChatMl) {
  auto tok = Tokenizer::from_vocab(testing::tiny_vocab({}));
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  ASSERT_TRUE((*tok)->chat_template().empty());
  auto t = ChatTemplate::of_model(**tok);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(t.status().message().find("--chat-template"), std::string::npos);
}

TEST(ChatTemplate, DefaultModelHasSmolLmSystemPrompt) {
  const Tokenizer& tok = testing::default_tokenizer();
  auto tmpl = ChatTemplate::of_model(tok);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
  EXPECT_EQ(tmpl->end_of_turn(), "<|im_end|>");
  // The rendered prompt encodes with its special tokens whole.
  std::vector<ChatMessage> msgs = {{"user", "Hi"}};
  auto text = tmpl->render(msgs, true);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(
      *text,
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  auto ids = tok.encode(*text, false, /*parse_special=*/true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), *tok.token_id("<|im_start|>"));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *tok.token_id("<|im_end|>")), 2);
}

// Message content and roles are the caller's text: their special-token
// spellings stay text, and only the template's own text makes special tokens
// (fixture chat_tokens.json, make_chat_tokens_fixture.py: Hugging Face's
// tokenizer with special tokens parsed in the template's text only).
TEST(ChatTemplate, ContentNeverBecomesSpecialTokens) {
  const Tokenizer& tok = testing::default_tokenizer();
  const auto j = nlohmann::json::parse(template_fixture("chat_tokens.json"));
  const int32_t im_start = *tok.token_id("<|im_start|>"), im_end = *tok.token_id("<|im_end|>");
  size_t n = 0, injecting = 0, separable = 0;
  for (const auto& c : j["cases"]) {
    auto tmpl = ChatTemplate::parse(j["templates"][c["template"].get<std::string>()].get<std::string>());
    ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
    std::vector<ChatMessage> messages;
    for (const auto& m : c["messages"]) messages.push_back({m["role"], m["content"]});
    const bool agp = c["add_generation_prompt"].get<bool>();
    SCOPED_TRACE(c["template"].get<std::string>() + " with " + c["messages"].dump());
    auto rendered = tmpl->render_pieces(messages, agp);
    ASSERT_TRUE(rendered.ok()) << rendered.status().to_string();
    const std::vector<PromptPiece>& pieces = *rendered;
    ASSERT_EQ(pieces.size(), c["pieces"].size());
    std::vector<int32_t> joined;  // each piece encoded alone, concatenated
    int template_specials = 0;
    for (size_t k = 0; k < pieces.size(); ++k) {
      const auto& want = c["pieces"][k];
      const bool from_template = pieces[k].source == PromptPiece::Source::kTemplate;
      EXPECT_EQ(from_template, want["template"].get<bool>()) << "piece " << k;
      EXPECT_EQ(pieces[k].text, want["text"].get<std::string>()) << "piece " << k;
      // The content's tokens are the oracle's with special tokens as text.
      const std::vector<int32_t> alone = tok.encode(pieces[k].text, false, /*parse_special=*/from_template);
      EXPECT_EQ(alone, c["piece_ids"][k].get<std::vector<int32_t>>()) << "piece " << k;
      joined.insert(joined.end(), alone.begin(), alone.end());
      if (from_template) {
        template_specials += static_cast<int>(std::count_if(
            alone.begin(), alone.end(), [&](int32_t id) { return id == im_start || id == im_end; }));
      }
    }
    const std::vector<int32_t> ids = encode_prompt(tok, pieces, /*add_special=*/false);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>());
    // The whole prompt is the template's tokens and the content's, joined.
    if (c["separable"].get<bool>()) {
      EXPECT_EQ(ids, joined);
      ++separable;
    }
    // Every <|im_start|> and <|im_end|> is one the template wrote.
    EXPECT_EQ(
        std::count_if(ids.begin(), ids.end(), [&](int32_t id) { return id == im_start || id == im_end; }),
        template_specials);
    if (c["injects"].get<bool>()) {
      // Encoding the rendered string whole would have let the content in.
      EXPECT_NE(ids, c["ids_whole"].get<std::vector<int32_t>>());
      EXPECT_EQ(tok.encode(*tmpl->render(messages, agp), false, true),
                c["ids_whole"].get<std::vector<int32_t>>());
      ++injecting;
    } else {
      // Without special text in the content nothing changes: the same tokens
      // as transformers' apply_chat_template(tokenize=True).
      EXPECT_EQ(ids, c["ids_whole"].get<std::vector<int32_t>>());
    }
    ++n;
  }
  EXPECT_GE(n, 28u);
  EXPECT_GE(injecting, 16u);
  EXPECT_GE(separable, 20u);
}

TEST(ChatTemplate, PiecesMarkRoleAndContentAsCallerText) {
  ChatTemplate t = ChatTemplate::chatml();
  std::vector<ChatMessage> msgs = {{"user", "x"}, {"assistant", ""}};
  const std::vector<PromptPiece> p = *t.render_pieces(msgs, true);
  using S = PromptPiece::Source;
  ASSERT_EQ(p.size(), 7u);
  const std::vector<std::pair<S, std::string>> want = {
      {S::kTemplate, "<|im_start|>"},
      {S::kCaller, "user"},
      {S::kTemplate, "\n"},
      {S::kCaller, "x"},
      {S::kTemplate, "<|im_end|>\n<|im_start|>"},
      {S::kCaller, "assistant"},
      {S::kTemplate, "\n<|im_end|>\n<|im_start|>assistant\n"}};  // the empty content leaves no piece
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(p[k].source, want[k].first) << k;
    EXPECT_EQ(p[k].text, want[k].second) << k;
  }
  EXPECT_EQ(*t.render(msgs, true),
            "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, BuiltInChatMlHasNoSystemPrompt) {
  ChatTemplate t = ChatTemplate::chatml();
  std::vector<ChatMessage> msgs = {{"user", "x"}};
  EXPECT_EQ(*t.render(msgs, false), "<|im_start|>user\nx<|im_end|>\n");
}

}  // namespace
}  // namespace nanoserve
