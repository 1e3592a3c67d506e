"""Gemma 2's and Gemma 3's own chat templates, as the fixtures'
tokenizer_config.json carry them (tests/fixtures/families/make_gemma.py),
rendered by our Jinja interpreter (`nanoserve render-template --jsonl`) and by
jinja2 as transformers configures it, byte for byte, over
test_real_chat_templates.py's contexts (every conversation, with and without
the generation prompt and tools, every set of kwargs). Where jinja2 raises
(a system turn for Gemma 2, roles that do not alternate) we must refuse with
the template's message.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_real_chat_templates as real  # noqa: E402

FIXTURES = os.path.join(real.ROOT, "tests", "fixtures", "families")


def gemma_contexts():
    out = []
    for name, ctx in real.contexts(True):
        out.append((name, dict(ctx, bos_token="<bos>", eos_token="<eos>")))
    return out


def test_gemma_templates_render_like_jinja2():
    templates = {}
    for family in ("gemma2", "gemma3"):
        with open(os.path.join(FIXTURES, family, "hf", "tokenizer_config.json"), encoding="utf-8") as f:
            templates[family] = json.load(f)["chat_template"]
    ctxs = {name: gemma_contexts() for name in templates}
    started = real.start_ours(templates, ctxs)
    want = real.jinja2_side(templates, ctxs)
    got = real.ours_side(templates, ctxs, started)
    problems = []
    for name in templates:
        same, refused, p = real.compare(name, want[name], got[name], ctxs[name])
        problems += p
        # Gemma 2 refuses a system turn, both refuse roles that do not alternate (tool turns).
        assert same >= 60 and refused >= 30, (name, same, refused)
        # The rendering is Gemma's: turns opened by <start_of_turn>, the assistant called model.
        first = next(w["text"] for w in want[name] if "text" in w)
        assert first.startswith("<bos><start_of_turn>user\n"), first
    assert not problems, f"{len(problems)} disagreements:\n" + "\n".join(problems[:40])
