"""template/ sits beside tokenizer/ and imports downward only: its files may
include template/, tokenizer/ and core/ headers (and system ones), never
engine/, server/, model/ or cli/; tokenizer/ never includes template/, so the
two do not include each other."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def includes(folder):
    out = []
    base = os.path.join(ROOT, "src", folder)
    for name in sorted(os.listdir(base)):
        if name.endswith((".h", ".cc", ".cuh", ".cu")):
            with open(os.path.join(base, name), encoding="utf-8") as f:
                out += [(name, inc) for inc in INCLUDE.findall(f.read())]
    return out


def test_template_includes_only_template_tokenizer_and_core():
    incs = includes("template")
    assert any(inc.startswith("tokenizer/") for _, inc in incs)  # the check sees real include lines
    bad = [(n, inc) for n, inc in incs if inc.split("/")[0] not in ("template", "tokenizer", "core")]
    assert not bad, bad


def test_tokenizer_does_not_include_template_or_anything_above():
    bad = [(n, inc) for n, inc in includes("tokenizer")
           if inc.split("/")[0] in ("template", "engine", "server", "model", "cli", "kvcache")]
    assert not bad, bad


def test_the_interpreter_left_tokenizer():
    left = [n for n in os.listdir(os.path.join(ROOT, "src", "tokenizer"))
            if n.startswith("jinja_") or n.startswith("chat_template.")]
    assert not left, left
