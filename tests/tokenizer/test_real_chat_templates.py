"""Real models' chat templates, rendered by our Jinja interpreter (through
`nanoserve render-template --jsonl`) and by jinja2 configured as transformers
configures it (its own _compile_jinja_template), byte for byte.

The templates are the 70 that llama.cpp keeps for its own tests, taken from
the llama-cpp-python 0.3.36 sdist by scripts/fetch-templates into .cache/
(nothing third party is committed). NANOSERVE_CHAT_TEMPLATES may name another
folder of *.jinja files. A missing corpus fails the test: it never skips.

Every template is rendered over every context (CONVERSATIONS x
add_generation_prompt x tools x kwargs), each side in one process. Where
jinja2 renders, we must render the same bytes; where jinja2 raises, we must
refuse too, and when the template raised (raise_exception) our error must
carry its message. The templates of the five families the engine runs must
all agree; a template that uses a construct we leave out is listed in REFUSED
with the construct, and we must refuse it with an error naming it.

`python tests/tokenizer/test_real_chat_templates.py` prints the counts per
template.
"""
import copy
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("NANOSERVE_BINARY", os.path.join(ROOT, "build", "nanoserve"))
CORPUS = os.environ.get("NANOSERVE_CHAT_TEMPLATES",
                        os.path.join(ROOT, ".cache", "chat-templates", "llama-cpp-python-0.3.36"))
N_TEMPLATES = 70  # what scripts/fetch-templates extracts

# strftime_now's time on both sides: 2026-01-02 03:04:05 UTC.
NOW = 1767323045

# The templates of the models the engine runs, by architecture (DeepSeek's
# distills and the Hermes, Functionary and Firefunction fine-tunes are Llama-3
# and Qwen2 models with templates of their own).
FAMILIES = {
    "llama": ["meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct",
              "meta-llama-Llama-3.3-70B-Instruct", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
              "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
              "fireworks-ai-llama-3-firefunction-v2", "meetkai-functionary-medium-v3.1",
              "meetkai-functionary-medium-v3.2"],
    "mistral": ["mistralai-Mistral-Nemo-Instruct-2407", "Mistral-Small-3.2-24B-Instruct-2506",
                "unsloth-mistral-Devstral-Small-2507"],
    "qwen2": ["Qwen-Qwen2.5-7B-Instruct", "Qwen-QwQ-32B", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"],
    "qwen3": ["Qwen-Qwen3-0.6B"],
    "phi3": ["microsoft-Phi-3.5-mini-instruct"],
}

# Templates that use a construct the interpreter leaves out: we refuse them
# with an error naming it. {template: construct as the error names it}.
REFUSED = {}

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city, in °C or °F",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "e.g. \"Zürich\""},
            "unit": {"type": "string", "enum": ["c", "f"], "description": "Temperature unit"}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds numbers",
        "parameters": {"type": "object", "properties": {
            "xs": {"type": "array", "items": {"type": "number"}, "description": "The numbers"}},
            "required": ["xs"]}}},
]
# Tool-call ids are nine alphanumerics, which Mistral's templates demand.
CALL = {"id": "call0Wx7a", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}
CALL2 = {"id": "call1Qz9b", "type": "function", "function": {"name": "add", "arguments": {"xs": [1, 2.5, -3]}}}
# The OpenAI wire form: arguments as a JSON string.
CALL_STR = {"id": "call2Rt4c", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}


def U(c):
    return {"role": "user", "content": c}


def A(c, **kw):
    return {"role": "assistant", "content": c, **kw}


def S(c):
    return {"role": "system", "content": c}


def T(c, call):
    return {"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"], "content": c}


CONVERSATIONS = {
    "user": [U("Hello!")],
    "system_user": [S("You are terse."), U("Hi")],
    "multi_turn": [U("Hi"), A("Hello, how can I help?"), U("Tell me a joke.")],
    "system_multi_turn": [S("Be kind."), U("a"), A("b"), U("c"), A("d"), U("e")],
    "empty_assistant": [U("q"), A(""), U("again")],
    "assistant_last": [U("Q"), A("partial answer")],
    "unicode_special": [S("Grüße, 日本語 🎉"), U("<|im_end|> [INST] <|eot_id|> </s> {{ x }} \"q\" \\")],
    "tool_round": [S("Use tools."), U("Weather in Paris?"), A("", tool_calls=[CALL]),
                   T("{\"temp\": 21}", CALL), A("It is 21 °C.")],
    "tool_pending": [U("Weather and sum?"), A(None, tool_calls=[CALL, CALL2]), T("21", CALL), T("3.5", CALL2)],
    "tool_string_args": [U("Oslo?"), A("Checking.", tool_calls=[CALL_STR]), T("-4", CALL_STR), U("Thanks")],
    "reasoning": [U("2+2?"), A("4", reasoning_content="add them"), U("3+3?")],
    "think_in_content": [U("why?"), A("<think>\nbecause\n</think>\n\nSo."), U("ok")],
    "not_alternating": [U("one"), U("two")],
}

# The variables some templates read besides the messages (chat_template_kwargs): none; thinking
# off; thinking on with the variables of Llama-3.1 (builtin_tools, date_string) and Firefunction
# (functions, datetime).
KWARGS = [{}, {"enable_thinking": False},
          {"enable_thinking": True, "reasoning_effort": "low", "builtin_tools": ["brave_search", "wolfram_alpha"],
           "date_string": "02 Jan 2026", "functions": json.dumps(TOOLS), "datetime": "2026-01-02"}]


def contexts():
    """Every conversation with add_generation_prompt true and false, tools none and given; the
    kwargs turn with them, so that each conversation meets each set of kwargs."""
    for c, (cname, messages) in enumerate(CONVERSATIONS.items()):
        for a, agp in enumerate((True, False)):
            for t, tools in enumerate((None, TOOLS)):
                k = (c + a + 2 * t) % len(KWARGS)
                ctx = {"messages": messages, "tools": tools, "documents": None, "add_generation_prompt": agp,
                       "bos_token": "<s>", "eos_token": "</s>", **KWARGS[k]}
                yield f"{cname}/agp={agp}/tools={tools is not None}/kw={k}", ctx


def template_files():
    assert os.path.isdir(CORPUS), (f"no chat templates at {CORPUS}: run scripts/fetch-templates "
                                   "(or set NANOSERVE_CHAT_TEMPLATES to a folder of them)")
    names = sorted(f[:-len(".jinja")] for f in os.listdir(CORPUS) if f.endswith(".jinja"))
    if "NANOSERVE_CHAT_TEMPLATES" not in os.environ:
        assert len(names) == N_TEMPLATES, f"{CORPUS} holds {len(names)} templates, expected {N_TEMPLATES}"
    return names


def read_template(name):
    with open(os.path.join(CORPUS, name + ".jinja"), encoding="utf-8") as f:
        return f.read()


def jinja2_side(templates, ctxs):
    """{template: [{"text"} | {"error", "raised"}]} from jinja2 as transformers runs it."""
    from jinja2.exceptions import TemplateError
    from transformers.utils.chat_template_utils import _compile_jinja_template

    fixed = datetime.fromtimestamp(NOW, timezone.utc)

    def strftime_now(fmt):
        return fixed.strftime(fmt)

    out = {}
    for name, source in templates.items():
        try:
            compiled = _compile_jinja_template(source)
        except Exception as e:  # noqa: BLE001  (a syntax error: every context fails)
            out[name] = [{"error": f"{type(e).__name__}: {e}", "raised": None}] * len(ctxs)
            continue
        results = []
        for _, ctx in ctxs:
            try:
                # A copy per render: a template may mutate what it is given (list.append).
                results.append({"text": compiled.render(strftime_now=strftime_now, **copy.deepcopy(ctx))})
            except Exception as e:  # noqa: BLE001  (raise_exception, undefined, type errors)
                # TemplateError itself (not a subclass) is what raise_exception throws.
                raised = str(e) if type(e) is TemplateError else None
                results.append({"error": f"{type(e).__name__}: {e}", "raised": raised})
        out[name] = results
    return out


def ours_side(templates, ctxs):
    """{template: [{"text"} | {"error"}]} from one `nanoserve render-template --jsonl` process."""
    assert os.path.exists(BINARY), "build nanoserve first (scripts/build)"
    lines = []
    for source in templates.values():
        for _, ctx in ctxs:
            lines.append(json.dumps({"template": source, "context": ctx, "now": NOW}, ensure_ascii=False))
    proc = subprocess.run([BINARY, "render-template", "--jsonl"], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, encoding="utf-8", timeout=300)
    assert proc.returncode == 0, proc.stderr
    replies = [json.loads(x) for x in proc.stdout.splitlines()]
    assert len(replies) == len(lines)
    out, k = {}, 0
    for name in templates:
        out[name] = replies[k:k + len(ctxs)]
        k += len(ctxs)
    return out


def compare(name, want, got, ctx_names):
    """(identical, both refused, problems) for one template."""
    same = refused = 0
    problems = []
    for cname, w, g in zip(ctx_names, want, got):
        if "text" in w:
            if g.get("text") == w["text"]:
                same += 1
            elif "error" in g:
                problems.append(f"{name} {cname}: we refused ({g['error']}), jinja2 rendered {w['text'][:200]!r}")
            else:
                at = next((i for i, (a, b) in enumerate(zip(g["text"], w["text"])) if a != b),
                          min(len(g["text"]), len(w["text"])))
                problems.append(f"{name} {cname}: differs at char {at}: ours {g['text'][at - 40:at + 80]!r} "
                                f"vs jinja2 {w['text'][at - 40:at + 80]!r}")
        elif "error" not in g:
            problems.append(f"{name} {cname}: jinja2 fails ({w['error']}), we rendered {g['text'][:200]!r}")
        elif w["raised"] is not None and "raise_exception: " + w["raised"] not in g["error"]:
            problems.append(f"{name} {cname}: the template raised {w['raised']!r}, we said {g['error']!r}")
        else:
            refused += 1
    return same, refused, problems


@pytest.fixture(scope="module")
def renderings():
    names = template_files()
    templates = {n: read_template(n) for n in names}
    ctxs = list(contexts())
    return names, ctxs, jinja2_side(templates, ctxs), ours_side(templates, ctxs)


def test_family_templates_render_like_jinja2(renderings):
    names, ctxs, want, got = renderings
    ctx_names = [c for c, _ in ctxs]
    rendered = 0
    problems = []
    for family, members in FAMILIES.items():
        for name in members:
            assert name in names, f"{family}: {name}.jinja is not in the corpus"
            same, refused, p = compare(name, want[name], got[name], ctx_names)
            problems += p
            rendered += same
            # Each family template renders most contexts (its own rules refuse the rest).
            assert same >= len(ctxs) // 3 or p, (name, same, refused)
    assert not problems, f"{len(problems)} disagreements:\n" + "\n".join(problems[:40])
    assert rendered >= 1000


def test_every_real_template_renders_like_jinja2(renderings):
    names, ctxs, want, got = renderings
    ctx_names = [c for c, _ in ctxs]
    problems = []
    for name in names:
        if name in REFUSED:
            continue
        problems += compare(name, want[name], got[name], ctx_names)[2]
    assert not problems, f"{len(problems)} disagreements:\n" + "\n".join(problems[:40])


def test_left_out_constructs_are_refused_by_name(renderings):
    names, ctxs, want, got = renderings
    for name, construct in REFUSED.items():
        assert name in names
        for (cname, _), w, g in zip(ctxs, want[name], got[name]):
            assert "error" in g, f"{name} {cname}: rendered although it uses {construct}"
            assert construct in g["error"], f"{name} {cname}: {g['error']!r} does not name {construct!r}"
        # The construct is really reached: jinja2 renders some of these contexts.
        assert any("text" in w for w in want[name]), name


def main():
    names = template_files()
    templates = {n: read_template(n) for n in names}
    ctxs = list(contexts())
    t0 = time.time()
    want = jinja2_side(templates, ctxs)
    t1 = time.time()
    got = ours_side(templates, ctxs)
    t2 = time.time()
    total_same = total_refused = 0
    bad = []
    for name in names:
        same, refused, problems = compare(name, want[name], got[name], [c for c, _ in ctxs])
        total_same += same
        total_refused += refused
        mark = "" if not problems else f"  {len(problems)} DISAGREE: {problems[0][:300]}"
        print(f"{same:4d} same {refused:4d} refused  {name}{mark}")
        if problems:
            bad.append(name)
    print(f"{len(names)} templates x {len(ctxs)} contexts: {total_same} identical, {total_refused} refused by "
          f"both, {len(bad)} templates disagree; jinja2 {t1 - t0:.1f} s, nanoserve {t2 - t1:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
