"""--reasoning-parser on the real server: the text of a thought goes to
reasoning_content, the rest to content, streamed or not, and
chat_template_kwargs reach the template (enable_thinking: false closes the
thought in the prompt, as Qwen3's template does). The template below opens a
thought in the prompt unless enable_thinking is false; the default model never
closes it, so its whole output is reasoning there."""
import openai
import pytest

from server_process import Server

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}{% endif %}")
ASK = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def rs():
    s = Server("--reasoning-parser", "qwen3", "--chat-template", TEMPLATE)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def oai(rs):
    return openai.OpenAI(base_url=rs.url + "/v1", api_key=rs.api_key, max_retries=0)


def test_thought_opened_by_the_template_is_reasoning(oai, rs):
    r = oai.chat.completions.create(model=rs.model, messages=ASK, max_tokens=24, temperature=0)
    msg = r.choices[0].message.model_dump()
    assert msg["reasoning_content"] and msg["content"] == ""
    # Streaming splits the same way.
    reasoning, content = "", ""
    for ch in oai.chat.completions.create(model=rs.model, messages=ASK, max_tokens=24, temperature=0, stream=True):
        d = ch.choices[0].delta.model_dump()
        reasoning += d.get("reasoning_content") or ""
        content += d.get("content") or ""
    assert reasoning == msg["reasoning_content"] and content == ""


def test_enable_thinking_false_reaches_the_template(oai, rs):
    r = oai.chat.completions.create(model=rs.model, messages=ASK, max_tokens=24, temperature=0,
                                    extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    msg = r.choices[0].message.model_dump()
    assert msg["content"] and not msg.get("reasoning_content")
    tok = rs.post("/tokenize", {"messages": ASK, "chat_template_kwargs": {"enable_thinking": False}}).json()
    prompt = rs.post("/detokenize", {"tokens": tok["tokens"]}).json()["prompt"]
    assert prompt.endswith("<think>\n\n</think>\n\n")
