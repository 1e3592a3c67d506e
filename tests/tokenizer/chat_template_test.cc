#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/default_tokenizer.h"

namespace nanoserve {
namespace {

nlohmann::json fixture() {
  return nlohmann::json::parse(testing::read_fixture("chat_template.json"));
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
    EXPECT_EQ(tmpl->render(messages, c["add_generation_prompt"].get<bool>()),
              c["rendered"].get<std::string>())
        << name << " with " << c["messages"].dump();
    ++n;
  }
  EXPECT_GE(n, 30u);
}

TEST(ChatTemplate, RefusesOtherTemplates) {
  auto j = fixture();
  for (const auto& t : j["not_chatml"]) {
    auto tmpl = ChatTemplate::parse(t.get<std::string>());
    ASSERT_FALSE(tmpl.ok()) << t.get<std::string>();
    EXPECT_EQ(tmpl.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(tmpl.status().message().find("ChatML"), std::string::npos);
  }
}

TEST(ChatTemplate, DefaultModelHasSmolLmSystemPrompt) {
  const Tokenizer& tok = testing::default_tokenizer();
  auto tmpl = ChatTemplate::parse(tok.chat_template());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
  ASSERT_TRUE(tmpl->default_system_prompt().has_value());
  EXPECT_EQ(*tmpl->default_system_prompt(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_EQ(tmpl->end_of_turn(), "<|im_end|>");
  // The rendered prompt encodes with its special tokens whole.
  std::vector<ChatMessage> msgs = {{"user", "Hi"}};
  auto ids = tok.encode(tmpl->render(msgs, true), false, /*parse_special=*/true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), *tok.token_id("<|im_start|>"));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *tok.token_id("<|im_end|>")), 2);
}

TEST(ChatTemplate, BuiltInChatMlHasNoSystemPrompt) {
  ChatTemplate t = ChatTemplate::chatml();
  std::vector<ChatMessage> msgs = {{"user", "x"}};
  EXPECT_EQ(t.render(msgs, false), "<|im_start|>user\nx<|im_end|>\n");
}

}  // namespace
}  // namespace nanoserve
