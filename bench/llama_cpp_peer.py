#!/usr/bin/env python3
"""CPU batch-1 speed of `nanoserve generate` against llama.cpp, in one run.

    .venv/bin/python bench/llama_cpp_peer.py [--threads 2] [--prompt-tokens 512] [--new-tokens 128] [--reps 3]

llama.cpp is llama-cpp-python built from the PyPI sdist on this machine
(CMAKE_ARGS="-DGGML_NATIVE=ON"). Both get the same text, which both
tokenizers turn into the same ids; both decode greedily past end tokens.
Prints prefill tok/s (the whole prompt in one step) and decode tok/s for
each engine, best of --reps runs each, interleaved, and the ratios.
"""

import argparse
import os
import re
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
PARAGRAPH = ("The history of computing is a story of people who wanted to calculate faster and more reliably than "
             "they could by hand. From the abacus to mechanical calculators, from punched cards to transistors, each "
             "step made machines smaller, cheaper and more capable. ")


def prompt_text(llm, n_tokens):
    text = ""
    while len(llm.tokenize(text.encode(), add_bos=True, special=True)) < n_tokens:
        text += PARAGRAPH
    # Trim word by word to at most n_tokens.
    words = text.split(" ")
    while len(llm.tokenize(" ".join(words).encode(), add_bos=True, special=True)) > n_tokens:
        words.pop()
    return " ".join(words)


def run_llama_cpp(llm, text, n_new):
    ids = llm.tokenize(text.encode(), add_bos=True, special=True)
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    prefill = time.perf_counter() - t0
    tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    t0 = time.perf_counter()
    for _ in range(n_new - 1):
        llm.eval([tok])
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    decode = time.perf_counter() - t0
    return len(ids) / prefill, (n_new - 1) / decode


def run_nanoserve(exe, text, n_new, threads):
    r = subprocess.run([exe, "generate", "-m", MODEL, "-p", text, "-n", str(n_new), "--temperature", "0",
                        "--ignore-eos", "--threads", str(threads)], capture_output=True, text=True, check=True)
    m = re.search(r"prompt (\d+) tokens, prefill ([\d.]+) tok/s .* decode ([\d.]+) tok/s", r.stderr)
    if not m:
        sys.exit("unexpected nanoserve output: " + r.stderr)
    return float(m.group(2)), float(m.group(3)), int(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--exe", default=os.path.join(ROOT, "build", "nanoserve"))
    a = ap.parse_args()
    from llama_cpp import Llama, __version__
    llm = Llama(model_path=MODEL, n_ctx=a.prompt_tokens + a.new_tokens + 8, n_batch=a.prompt_tokens + a.new_tokens + 8,
                n_threads=a.threads, n_threads_batch=a.threads, verbose=False)
    text = prompt_text(llm, a.prompt_tokens)
    best = {"ns_prefill": 0, "ns_decode": 0, "lc_prefill": 0, "lc_decode": 0}
    for rep in range(a.reps):
        p, d, n = run_nanoserve(a.exe, text, a.new_tokens, a.threads)
        best["ns_prefill"], best["ns_decode"] = max(best["ns_prefill"], p), max(best["ns_decode"], d)
        p, d = run_llama_cpp(llm, text, a.new_tokens)
        best["lc_prefill"], best["lc_decode"] = max(best["lc_prefill"], p), max(best["lc_decode"], d)
        print(f"rep {rep}: nanoserve prefill {best['ns_prefill']:.1f} decode {best['ns_decode']:.1f} | "
              f"llama.cpp prefill {best['lc_prefill']:.1f} decode {best['lc_decode']:.1f} (best so far)",
              file=sys.stderr)
    print(f"prompt {n} tokens, {a.new_tokens} new tokens, {a.threads} threads, best of {a.reps}; "
          f"llama-cpp-python {__version__}")
    print(f"  prefill tok/s: nanoserve {best['ns_prefill']:.1f}  llama.cpp {best['lc_prefill']:.1f}  "
          f"ratio {best['ns_prefill'] / best['lc_prefill']:.2f}")
    print(f"  decode  tok/s: nanoserve {best['ns_decode']:.1f}  llama.cpp {best['lc_decode']:.1f}  "
          f"ratio {best['ns_decode'] / best['lc_decode']:.2f}")


if __name__ == "__main__":
    main()
