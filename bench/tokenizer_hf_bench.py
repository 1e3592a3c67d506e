#!/usr/bin/env python3
"""Peer for build/tokenizer_bench: Hugging Face tokenizers (Rust) encoding the
same ~4 MB text with the same vocab (built from the GGUF, SmolLM2 pre-tokenizer),
one thread: line by line, and in one call (much slower in HF: it tracks
offsets over the whole string). Prints MB/s; run right after tokenizer_bench.

Usage: .venv/bin/python bench/tokenizer_hf_bench.py
"""
import json
import os
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures", "tokenizer"))
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import make_parity_fixture  # noqa: E402

TARGET = 4 << 20


def bench_text():
    with open(os.path.join(ROOT, "tests", "fixtures", "tokenizer", "corpus.json"), encoding="utf-8") as f:
        corpus = json.load(f)
    block = "".join(e["text"] + "\n" for e in corpus if "text" in e)
    parts, size, i = [], 0, 0
    while size < TARGET:
        chunk = f"Section {i}\n" + block
        parts.append(chunk)
        size += len(chunk.encode("utf-8"))
        i += 1
    return "".join(parts)


def main():
    hf = make_parity_fixture.load_hf(make_parity_fixture.DEFAULT_MODEL)
    backend = hf.backend_tokenizer
    backend.pre_tokenizer = make_parity_fixture.smollm_pre_tokenizer()
    text = bench_text()
    nbytes = len(text.encode("utf-8"))
    lines = text.splitlines(keepends=True)

    def run(name, fn, reps):
        fn()  # warm up (HF caches words too)
        best = float("inf")
        for _ in range(reps):
            t0 = time.process_time()  # CPU time: the machine is shared
            n = fn()
            best = min(best, time.process_time() - t0)
        print(f"HF tokenizers {name}: {nbytes / 1e6:.2f} MB, {n} tokens, best of {reps} {best * 1e3:.1f} ms CPU "
              f"= {nbytes / 1e6 / best:.2f} MB/s")

    run("encode per line", lambda: sum(len(backend.encode(l, add_special_tokens=False).ids) for l in lines), 3)
    run("encode whole text in one call", lambda: len(backend.encode(text, add_special_tokens=False).ids), 1)

if __name__ == "__main__":
    main()
