"""Our Jinja interpreter (through `nanoserve render-template --jsonl`) against
jinja2 configured as transformers configures it (its own
_compile_jinja_template: ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, the tojson override, raise_exception), byte for
byte: templates written for this suite, one or a few constructs each, and
family-style chat templates (tests/fixtures/chat_templates/) over many
conversations. A template that jinja2 refuses must be refused by us too, with
a line and column."""
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.path.join(ROOT, "build", "nanoserve")
FAMILIES = os.path.join(ROOT, "tests", "fixtures", "chat_templates")

from constructs import CONSTRUCTS, DATA, ERRORS, LEFT_OUT  # noqa: E402  (tests/template/constructs.py)


@pytest.fixture(scope="module")
def jinja_env():
    from transformers.utils.chat_template_utils import _compile_jinja_template

    return _compile_jinja_template


class Renderer:
    def __init__(self):
        assert os.path.exists(BINARY), "build nanoserve first (scripts/build)"
        self.proc = subprocess.Popen([BINARY, "render-template", "--jsonl"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, encoding="utf-8")

    def render(self, template, context):
        self.proc.stdin.write(json.dumps({"template": template, "context": context}, ensure_ascii=False) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def ours():
    r = Renderer()
    yield r
    r.close()


def theirs(compile_template, template, context):
    try:
        return {"text": compile_template(template).render(**context)}
    except Exception as e:  # noqa: BLE001  (any jinja2 failure: syntax, undefined, raise_exception)
        return {"error": f"{type(e).__name__}: {e}"}


def check(ours, compile_template, template, context, name):
    want = theirs(compile_template, template, context)
    got = ours.render(template, context)
    if "error" in want:
        assert "error" in got, f"{name}: jinja2 fails ({want['error']}) but we rendered {got.get('text')!r}"
        return False
    assert "text" in got, f"{name}: we failed ({got['error']}), jinja2 rendered {want['text']!r}"
    assert got["text"] == want["text"], f"{name}: differs from jinja2: {got['text']!r} vs {want['text']!r}"
    return True


def test_constructs(ours, jinja_env):
    rendered, failures = 0, []
    for name, template in CONSTRUCTS:
        try:
            rendered += check(ours, jinja_env, template, DATA, name)
        except AssertionError as e:
            failures.append(str(e).split("\nassert")[0])
    assert not failures, "\n".join(failures)
    assert rendered == len(CONSTRUCTS)  # every construct template renders (none is an error case)
    assert rendered >= 150


def test_left_out_constructs_are_refused_by_name(ours, jinja_env):
    """What we leave out (docs/chat_template.md lists it): jinja2 renders each, we refuse it with an
    error that names the construct and its position."""
    for name, template, says in LEFT_OUT:
        want = theirs(jinja_env, template, DATA)
        assert "text" in want, f"{name}: jinja2 refuses it ({want['error']}), so it is not left out"
        got = ours.render(template, DATA)
        assert "error" in got, f"{name}: we rendered {got.get('text')!r}"
        assert says in got["error"], f"{name}: {got['error']!r} does not say {says!r}"
        assert "line " in got["error"] and "column " in got["error"], f"{name}: {got['error']}"
    assert len(LEFT_OUT) >= 30


def test_errors_are_refused_with_a_position(ours, jinja_env):
    for name, template in ERRORS:
        want = theirs(jinja_env, template, DATA)
        assert "error" in want, f"{name}: jinja2 renders it, so it is not an error case"
        got = ours.render(template, DATA)
        assert "error" in got, f"{name}: we rendered {got.get('text')!r}"
        assert "line " in got["error"] and "column " in got["error"], f"{name}: {got['error']}"


# ---- conversations over the family templates ----

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city — °C or °F",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "e.g. \"Zürich\""},
            "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "sum", "description": "Adds numbers",
        "parameters": {"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "number"}}}}}},
]
CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}
CALL2 = {"type": "function", "function": {"name": "sum", "arguments": {"xs": [1, 2.5, -3e-07]}}}

U = lambda c: {"role": "user", "content": c}  # noqa: E731
A = lambda c: {"role": "assistant", "content": c}  # noqa: E731
S = lambda c: {"role": "system", "content": c}  # noqa: E731
T = lambda c: {"role": "tool", "content": c}  # noqa: E731

CONVERSATIONS = {
    "one_user": [U("Hello!")],
    "system_user": [S("You are terse."), U("Hi")],
    "multi_turn": [U("Hi"), A("Hello, how can I help?"), U("Tell me a joke.")],
    "system_multi_turn": [S("Be kind."), U("a"), A("b"), U("c"), A("d"), U("e")],
    "empty_user": [U("")],
    "empty_assistant": [U("q"), A(""), U("again")],
    "whitespace": [S("  padded system \n"), U("\n\n  lots of space  \t\n"), A(" answer ")],
    "unicode": [U("Grüße, 日本語, emoji 🎉, RTL שלום"), A("ça va — “quotes”")],
    "special_text": [U("<|im_start|>system\nignore<|im_end|> [INST] <|eot_id|> </s>")],
    "escapes": [U("back\\slash \"double\" 'single' {{ not jinja }} {% nor %}")],
    "only_system": [S("Just a system prompt.")],
    "assistant_last": [U("Q"), A("partial answer")],
    "tool_round": [S("Use tools."), U("Weather in Paris?"), {"role": "assistant", "content": "", "tool_calls": [CALL]},
                   T('{"temp": 21}'), A("It is 21 °C.")],
    "two_tool_results": [U("Both?"), {"role": "assistant", "content": "Calling.", "tool_calls": [CALL, CALL2]},
                         T("21"), T("0.5"), U("Thanks")],
    "tool_call_no_content": [U("sum 1 2"), {"role": "assistant", "content": None, "tool_calls": [CALL2]}, T("3")],
    "reasoning_field": [U("2+2?"), {"role": "assistant", "content": "4", "reasoning_content": "\nadd them\n"},
                        U("3+3?")],
    "think_in_content": [U("why?"), A("<think>\nbecause\n</think>\n\nSo."), U("ok"), A("<think>x</think>y")],
    "not_alternating": [U("one"), U("two")],
    "long": [m for k in range(40) for m in (U(f"question {k}"), A(f"answer {k}"))] + [U("last")],
}

FAMILY_FILES = ["llama3.jinja", "mistral.jinja", "qwen25_tools.jinja", "qwen3_thinking.jinja", "phi3.jinja"]


def contexts():
    for cname, messages in CONVERSATIONS.items():
        for agp in (True, False, None):  # None: the variable is not given at all
            for tools in (None, TOOLS):
                for kwargs in ({}, {"enable_thinking": False, "date_string": "01 Jan 2026"}):
                    ctx = {"messages": messages, "tools": tools, "documents": None,
                           "bos_token": "<s>", "eos_token": "</s>", **kwargs}
                    if agp is not None:
                        ctx["add_generation_prompt"] = agp
                    yield f"{cname}/agp={agp}/tools={tools is not None}/kw={bool(kwargs)}", ctx


@pytest.mark.parametrize("family", FAMILY_FILES)
def test_family_templates(ours, jinja_env, family):
    with open(os.path.join(FAMILIES, family), encoding="utf-8") as f:
        template = f.read()
    rendered = errors = 0
    for name, ctx in contexts():
        if check(ours, jinja_env, template, ctx, f"{family} {name}"):
            rendered += 1
        else:
            errors += 1
    # Most conversations render; the family's own rules refuse the rest (alternation, roles).
    assert rendered >= 100, (rendered, errors)


def test_default_model_template(ours, jinja_env):
    """The default model's own template (from its GGUF), read through `nanoserve render-template -m`."""
    model = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    # scripts/test fetches it before the suites: missing, the setup is broken.
    assert os.path.exists(model), f"{model} missing: run scripts/fetch-model"
    from gguf import GGUFReader

    field = GGUFReader(model).fields["tokenizer.chat_template"]
    template = bytes(field.parts[field.data[0]]).decode("utf-8")
    n = 0
    for name, ctx in contexts():
        n += check(ours, jinja_env, template, ctx, f"default model {name}")
    assert n >= 100
