"""Render time of a chat template: nanoserve render-template --jsonl (each line
compiles and renders, JSON in and out included) against jinja2 as transformers
builds it (compiled once), on the Qwen3-style fixture with an 81-message chat.
Usage: .venv/bin/python bench/chat_template_render.py [N]"""
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
template = open(os.path.join(ROOT, "tests/fixtures/chat_templates/qwen3_thinking.jinja"), encoding="utf-8").read()
msgs = []
for k in range(40):
    msgs += [{"role": "user", "content": f"question {k} " * 20},
             {"role": "assistant", "content": f"<think>r{k}</think>answer {k} " * 20}]
msgs.append({"role": "user", "content": "last"})
ctx = {"messages": msgs, "tools": None, "add_generation_prompt": True}
line = json.dumps({"template": template, "context": ctx}) + "\n"
p = subprocess.Popen([os.path.join(ROOT, "build/nanoserve"), "render-template", "--jsonl"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, text=True)
t0 = time.perf_counter()
for _ in range(n):
    p.stdin.write(line)
    p.stdin.flush()
    out = json.loads(p.stdout.readline())
ours = (time.perf_counter() - t0) / n
p.stdin.close()
from transformers.utils.chat_template_utils import _compile_jinja_template  # noqa: E402

compiled = _compile_jinja_template(template)
t0 = time.perf_counter()
for _ in range(n):
    text = compiled.render(**ctx)
theirs = (time.perf_counter() - t0) / n
assert text == out["text"]
print(f"nanoserve: {ours * 1e3:.2f} ms per compile+render, jinja2: {theirs * 1e3:.2f} ms per render, "
      f"{len(text)} bytes, identical")
