#!/usr/bin/env python3
"""Writes repeat_text.jsonl: a repetitive workload for speculative decoding.

Each prompt quotes a paragraph of this repository's own documentation and then starts quoting it again, either word for word
or with one word replaced: the workload of summaries that quote their input and
of small edits, where a model's continuation copies the prompt and prompt
lookup (n-gram) proposals are mostly right. The prompts are raw text (no chat
template): the default model copies far more reliably when the copy has already
begun than when asked to in a chat turn.

One {"prompt": ...} a line, for `nanoserve bench --dataset-name custom`.
Deterministic: paragraphs are taken in file order from the files below.

    python3 bench/datasets/make_repeat_text.py   # from the repository root
"""

import json
import os
import re

DOCS = ["docs/architecture.md", "docs/engine.md", "docs/kvcache.md", "docs/server.md", "docs/tokenizer.md",
        "docs/kernels.md", "docs/forward.md", "docs/http.md", "docs/bench_serve.md", "docs/model-loading.md",
        "docs/model_cuda.md", "docs/ops_cuda.md", "docs/benchmarks.md", "docs/chat_template.md"]
NUM_PROMPTS = 64


def paragraphs(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for para in re.split(r"\n\s*\n", text):
        para = " ".join(line.strip() for line in para.splitlines())
        # Prose only: no tables, code, headings or lists.
        if 300 <= len(para) <= 900 and not para.startswith(("#", "|", "```", "-", "*", "1.")) and "`" not in para[:20]:
            yield para


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    out = []
    for rel in DOCS:
        for para in paragraphs(os.path.join(root, rel)):
            words = para.split()
            start = " ".join(words[:3])
            if len(out) % 2 == 0:
                prompt = (f"Here is a paragraph from {rel}:\n\n{para}\n\n"
                          f"The same paragraph, quoted word for word:\n\n{start}")
            else:
                common = sorted({w for w in words if w.isalpha() and len(w) >= 6 and words.count(w) >= 2}) or ["the"]
                old = common[0]
                new = old.upper()
                prompt = (f"Here is a paragraph from {rel}:\n\n{para}\n\n"
                          f"The same paragraph with every \"{old}\" written as \"{new}\":\n\n{start}")
            out.append({"prompt": prompt})
    out = out[::max(1, len(out) // NUM_PROMPTS)][:NUM_PROMPTS]
    assert len(out) == NUM_PROMPTS, len(out)
    with open(os.path.join(root, "bench", "datasets", "repeat_text.jsonl"), "w", encoding="utf-8") as f:
        for o in out:
            f.write(json.dumps(o) + "\n")


if __name__ == "__main__":
    main()
