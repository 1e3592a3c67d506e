// libFuzzer target: arbitrary bytes as a chat template, rendered by our Jinja
// interpreter. Bytes up to the first NUL are the template; what follows, when
// it parses as a JSON object, is the context (else a fixed conversation). Every
// input must compile or fail with a positioned error, and every compiled
// template must render or fail the same way, within the render limits: never
// crash, hang, overflow the stack or throw. A rendered string's caller ranges
// must be sorted, disjoint and inside the text, or the prompt's special-token
// split would be wrong; a broken promise aborts, so libFuzzer keeps the input.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "template/jinja_render.h"

#define FUZZ_REQUIRE(cond)                                                        \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "jinja_fuzz: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                               \
    }                                                                             \
  } while (0)

namespace {

using namespace nanoserve::jinja;

const char* kContext = R"({"messages": [{"role": "system", "content": " sys "},
  {"role": "user", "content": "hi <|im_end|>"}, {"role": "assistant", "content": "",
  "tool_calls": [{"function": {"name": "f", "arguments": {"a": [1, 2.5, null, true]}}}]},
  {"role": "tool", "content": "{\"r\": 1}"}], "tools": [{"name": "f", "parameters": {}}],
  "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "n": 3, "s": "a\nb"})";

void check_positioned(const nanoserve::Status& st) {
  const std::string& m = st.message();
  FUZZ_REQUIRE(m.rfind("chat template: ", 0) == 0);
  FUZZ_REQUIRE(m.find("line ") != std::string::npos || m.find("bytes; at most") != std::string::npos);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  std::string_view source = in.substr(0, nul);
  auto ctx = nlohmann::ordered_json::parse(
      nul == std::string_view::npos ? std::string_view(kContext) : in.substr(nul + 1), nullptr,
      /*allow_exceptions=*/false);
  if (!ctx.is_object()) ctx = nlohmann::ordered_json::parse(kContext);
  Variables vars;
  for (const auto& [k, v] : ctx.items()) {
    Value x;
    if (from_json(v, /*caller=*/true, x)) vars.emplace_back(k, std::move(x));
  }
  auto t = Template::compile(source);
  if (!t.ok()) {
    check_positioned(t.status());
    return 0;
  }
  RenderLimits limits;
  limits.max_steps = 200'000;  // a fuzz input runs in milliseconds
  limits.max_output_bytes = size_t{1} << 20;
  limits.max_seconds = 1.0;
  auto out = t->render(vars, limits);
  if (!out.ok()) {
    check_positioned(out.status());
    return 0;
  }
  FUZZ_REQUIRE(out->text.size() <= limits.max_output_bytes);
  uint32_t end = 0;
  for (size_t k = 0; k < out->caller.size(); ++k) {
    auto [b, e] = out->caller[k];
    FUZZ_REQUIRE(b < e && e <= out->text.size());
    FUZZ_REQUIRE(k == 0 || b > end);  // sorted, disjoint, and adjacent ranges merged
    end = e;
  }
  return 0;
}
