#!/usr/bin/env python3
"""Writes repeat_code.jsonl: a repetitive workload for speculative decoding.

Each prompt quotes a block of this repository's own C++ source and then starts
the same block again, edited (one identifier renamed), so a model continues by
copying the quoted text: the workload of code edits and summaries that quote
their input, where prompt lookup (n-gram) proposals are mostly right.

One {"prompt": ...} a line, for `nanoserve bench --dataset-name custom`.
Deterministic: the blocks are taken in file order from the files listed below.

    python3 bench/datasets/make_repeat_code.py   # from the repository root
"""

import json
import os
import re

FILES = [
    "src/kvcache/block_manager.cc",
    "src/engine/scheduler.cc",
    "src/engine/sampler.cc",
    "src/engine/stop_checker.cc",
    "src/core/thread_pool.cc",
    "src/tokenizer/bpe.cc",
]
BLOCK_LINES = 24
NUM_PROMPTS = 64


def blocks(path):
    with open(path, encoding="utf-8") as f:
        lines = [l.rstrip("\n") for l in f]
    # Blocks that start at a function or a comment and hold real code.
    for start in range(0, len(lines) - BLOCK_LINES, BLOCK_LINES // 2):
        block = lines[start:start + BLOCK_LINES]
        text = "\n".join(block)
        if text.count(";") >= 6 and "#include" not in text:
            yield text


def rename(text):
    # The longest identifier that appears at least twice gets a new name.
    names = re.findall(r"\b[a-z_][a-z0-9_]{4,}\b", text)
    common = sorted({n for n in names if names.count(n) >= 2}, key=lambda n: (-len(n), n))
    if not common:
        return None
    old = common[0]
    return old, old + "_v2"


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    out = []
    for rel in FILES:
        for text in blocks(os.path.join(root, rel)):
            r = rename(text)
            if r is None:
                continue
            old, new = r
            prompt = (f"Here is a piece of C++ code from {rel}:\n\n```cpp\n{text}\n```\n\n"
                      f"Here is the same code again, unchanged except that `{old}` is renamed to `{new}`:\n\n```cpp\n")
            out.append({"prompt": prompt})
    out = out[::max(1, len(out) // NUM_PROMPTS)][:NUM_PROMPTS]
    assert len(out) == NUM_PROMPTS, len(out)
    with open(os.path.join(root, "bench", "datasets", "repeat_code.jsonl"), "w", encoding="utf-8") as f:
        for o in out:
            f.write(json.dumps(o) + "\n")


if __name__ == "__main__":
    main()
