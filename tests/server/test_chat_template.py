"""Chat templates through the HTTP API: the request's own chat_template (honoured,
as vLLM does), chat_template_kwargs (reaching only the template's own
variables), the errors with the field they name, and --chat-template."""
import pytest

from server_process import Server
from test_validation import assert_error

MSGS = [{"role": "user", "content": "hi"}]


def tokenize(server, **fields):
    r = server.post("/tokenize", dict({"model": server.model, "messages": MSGS}, **fields))
    return r


def text_of(server, r):
    assert r.status_code == 200, r.text
    d = server.post("/detokenize", {"model": server.model, "tokens": r.json()["tokens"]})
    assert d.status_code == 200, d.text
    return d.json()["prompt"]


def test_request_template_is_rendered(server):
    t = "{% for m in messages %}<{{ m.role | upper }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}!{% endif %}"
    assert text_of(server, tokenize(server, chat_template=t)) == "<USER>hi!"
    assert text_of(server, tokenize(server, chat_template=t, add_generation_prompt=False)) == "<USER>hi"


def test_model_template_by_default(server):
    text = text_of(server, tokenize(server))
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_kwargs_reach_the_templates_variables(server):
    t = "{{ greeting | default('none') }} {{ messages[0].content }}{% if enable_thinking is false %} /no_think{% endif %}"
    assert text_of(server, tokenize(server, chat_template=t)) == "none hi"
    assert text_of(server, tokenize(server, chat_template=t, chat_template_kwargs={"greeting": "hey"})) == "hey hi"
    got = text_of(server, tokenize(server, chat_template=t, chat_template_kwargs={"enable_thinking": False}))
    assert got == "none hi /no_think"


def test_kwargs_cannot_replace_reserved_variables(server):
    t = "{{ messages | length }}|{{ messages[0].content }}|{{ bos_token | default('nobos') }}|{{ add_generation_prompt }}|{{ tools }}"
    plain = text_of(server, tokenize(server, chat_template=t))
    assert plain.startswith("1|hi|") and plain.endswith("|True|None"), plain
    evil = {"messages": [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}],
            "bos_token": "EVIL", "add_generation_prompt": False, "tools": [{"name": "t"}]}
    assert text_of(server, tokenize(server, chat_template=t, chat_template_kwargs=evil)) == plain


def test_kwargs_keep_their_key_order(server):
    t = "{{ schema | tojson }}"
    kw = {"schema": {"zeta": 1, "alpha": {"y": 2, "b": 3}}}
    assert text_of(server, tokenize(server, chat_template=t, chat_template_kwargs=kw)) == \
        '{"zeta": 1, "alpha": {"y": 2, "b": 3}}'


def test_kwargs_content_is_not_special(server):
    t = "{{ extra }}{{ messages[0].content }}"
    ids = tokenize(server, chat_template=t, chat_template_kwargs={"extra": "<|im_start|>"}).json()["tokens"]
    special = server.post("/tokenize", {"model": server.model, "prompt": "<|im_start|>"}).json()["tokens"]
    assert special[-1] not in ids  # the caller's text never becomes a special token


@pytest.mark.parametrize("path", ["/tokenize", "/v1/chat/completions"])
def test_bad_fields_are_400_naming_them(server, path):
    body = {"model": server.model, "messages": MSGS, "max_tokens": 1}
    assert_error(server.post(path, dict(body, chat_template_kwargs=[1])), 400, param="chat_template_kwargs")
    assert_error(server.post(path, dict(body, chat_template_kwargs="x")), 400, param="chat_template_kwargs")
    assert_error(server.post(path, dict(body, chat_template=5)), 400, param="chat_template")
    err = assert_error(server.post(path, dict(body, chat_template="{% for m in messages %}")), 400,
                       param="chat_template")
    assert "line 1, column" in err["message"] and "endfor" in err["message"]
    err = assert_error(server.post(path, dict(body, chat_template="{{ raise_exception('no users allowed') }}")),
                       400, param="chat_template")
    assert "no users allowed" in err["message"]


def test_chat_completion_uses_the_request_template(server):
    t = "Q: {{ messages[-1].content }}\nA:"
    r = server.post("/v1/chat/completions", {"model": server.model, "messages": MSGS, "max_tokens": 2,
                                             "temperature": 0, "chat_template": t})
    assert r.status_code == 200, r.text
    want = server.post("/tokenize", {"model": server.model, "prompt": "Q: hi\nA:", "add_special_tokens": False})
    assert r.json()["usage"]["prompt_tokens"] == want.json()["count"]


def test_render_limits_are_errors_not_hangs(server):
    t = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    err = assert_error(tokenize(server, chat_template=t), 400, param="chat_template")
    # 5,000,000 steps take about a second; on a loaded machine the 2 s clock may stop it first.
    assert "max_steps" in err["message"] or "max_seconds" in err["message"], err["message"]
    t = "{% macro m(k) %}{{ m(k + 1) }}{% endmacro %}{{ m(0) }}"
    err = assert_error(tokenize(server, chat_template=t), 400, param="chat_template")
    assert "max_call_depth" in err["message"]


def test_chat_template_flag_overrides_the_models():
    s = Server("--chat-template", "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}")
    try:
        assert text_of(s, tokenize(s)) == "[user]hi"
    finally:
        s.stop()
