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
carry its message. Every template agrees on every context, the templates of
the five families the engine runs first among them: none needs a construct we
leave out (those are refused by name; test_chat_template_conformance.py's
LEFT_OUT lists them).

`python tests/template/test_real_chat_templates.py` prints the counts per
template.
"""
import json
import os
import subprocess
import sys
import tempfile
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


def contexts(every_kwargs):
    """Every conversation with add_generation_prompt true and false, tools none and given, and
    with each set of kwargs (every_kwargs), or with one set that turns with the others, so that
    each conversation still meets each set."""
    for c, (cname, messages) in enumerate(CONVERSATIONS.items()):
        for a, agp in enumerate((True, False)):
            for t, tools in enumerate((None, TOOLS)):
                ks = range(len(KWARGS)) if every_kwargs else [(c + a + 2 * t) % len(KWARGS)]
                for k in ks:
                    ctx = {"messages": messages, "tools": tools, "documents": None, "add_generation_prompt": agp,
                           "bos_token": "<s>", "eos_token": "</s>", **KWARGS[k]}
                    yield f"{cname}/agp={agp}/tools={tools is not None}/kw={k}", ctx


FAMILY_TEMPLATES = {name for members in FAMILIES.values() for name in members}


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


def load():
    """{template: source}, {template: [(context name, context)]}: the family templates get every
    set of kwargs with every conversation, the others one set per conversation."""
    names = template_files()
    templates = {n: read_template(n) for n in names}
    ctxs = {n: list(contexts(n in FAMILY_TEMPLATES)) for n in names}
    return templates, ctxs


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
            out[name] = [{"error": f"{type(e).__name__}: {e}", "raised": None}] * len(ctxs[name])
            continue
        results = []
        for _, ctx in ctxs[name]:
            try:
                # No copy: the immutable sandbox refuses list.append and the like.
                results.append({"text": compiled.render(strftime_now=strftime_now, **ctx)})
            except Exception as e:  # noqa: BLE001  (raise_exception, undefined, type errors)
                # TemplateError itself (not a subclass) is what raise_exception throws.
                raised = str(e) if type(e) is TemplateError else None
                results.append({"error": f"{type(e).__name__}: {e}", "raised": raised})
        out[name] = results
    return out


def start_ours(templates, ctxs):
    """One `nanoserve render-template --jsonl` process over every template and context, started
    now and read by ours_side (it runs while jinja2 renders)."""
    assert os.path.exists(BINARY), "build nanoserve first (scripts/build)"
    lines = []
    for name, source in templates.items():
        for k, (_, ctx) in enumerate(ctxs[name]):
            line = {"context": ctx, "now": NOW}
            if k == 0:
                line["template"] = source  # the lines after it render the same template
            lines.append(json.dumps(line, ensure_ascii=False))
    out = tempfile.TemporaryFile()
    proc = subprocess.Popen([BINARY, "render-template", "--jsonl"], stdin=subprocess.PIPE, stdout=out,
                            stderr=subprocess.PIPE)
    # The replies go to a file, so the whole input can be written at once without a deadlock.
    proc.stdin.write(("\n".join(lines) + "\n").encode("utf-8"))
    proc.stdin.close()
    return proc, out, len(lines)


def ours_side(templates, ctxs, started):
    """{template: [{"text"} | {"error"}]} from the process start_ours started."""
    proc, out, n_lines = started
    assert proc.wait(timeout=300) == 0, proc.stderr.read().decode()
    out.seek(0)
    replies = [json.loads(x) for x in out.read().decode("utf-8").splitlines()]
    assert len(replies) == n_lines
    result, k = {}, 0
    for name in templates:
        result[name] = replies[k:k + len(ctxs[name])]
        k += len(ctxs[name])
    return result


def compare(name, want, got, ctxs):
    """(identical, both refused, problems) for one template."""
    same = refused = 0
    problems = []
    for (cname, _), w, g in zip(ctxs, want, got):
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


def render_all():
    templates, ctxs = load()
    started = start_ours(templates, ctxs)  # nanoserve renders while jinja2 does
    return templates, ctxs, jinja2_side(templates, ctxs), ours_side(templates, ctxs, started)


@pytest.fixture(scope="module")
def renderings():
    return render_all()


def test_family_templates_render_like_jinja2(renderings):
    templates, ctxs, want, got = renderings
    rendered = 0
    problems = []
    for family, members in FAMILIES.items():
        for name in members:
            assert name in templates, f"{family}: {name}.jinja is not in the corpus"
            same, refused, p = compare(name, want[name], got[name], ctxs[name])
            problems += p
            rendered += same
            # Each renders many contexts; its own rules refuse the rest (Hermes and Command-R need
            # tools, Firefunction its functions, Mistral alternating roles).
            assert same >= 40 or p, (name, same, refused)
    assert not problems, f"{len(problems)} disagreements:\n" + "\n".join(problems[:40])
    assert rendered >= 2000


def test_every_real_template_renders_like_jinja2(renderings):
    templates, ctxs, want, got = renderings
    problems = []
    identical = 0
    for name in templates:
        same, _, p = compare(name, want[name], got[name], ctxs[name])
        problems += p
        identical += same
        # Each template is exercised, not only refused: at least a third of its contexts render.
        assert same * 3 >= len(ctxs[name]) or p, (name, same)
    assert not problems, f"{len(problems)} disagreements:\n" + "\n".join(problems[:40])
    assert identical >= 4500


def main():
    t0 = time.time()
    templates, ctxs, want, got = render_all()
    seconds = time.time() - t0
    totals = {"family": [0, 0, 0], "other": [0, 0, 0]}  # identical, refused by both, contexts
    bad = []
    for name in templates:
        same, refused, problems = compare(name, want[name], got[name], ctxs[name])
        t = totals["family" if name in FAMILY_TEMPLATES else "other"]
        t[0] += same
        t[1] += refused
        t[2] += len(ctxs[name])
        mark = "" if not problems else f"  {len(problems)} DISAGREE: {problems[0][:300]}"
        print(f"{same:4d} same {refused:4d} refused  {name}{mark}")
        if problems:
            bad.append(name)
    for group, (same, refused, n) in totals.items():
        print(f"{group} templates: {same} identical + {refused} refused by both of {n} renderings")
    print(f"{len(templates)} templates, {sum(len(c) for c in ctxs.values())} renderings, {len(bad)} templates "
          f"disagree; {seconds:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
