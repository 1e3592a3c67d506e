#!/usr/bin/env python3
"""HF transformers on the GPU as the peer of scripts/gpu-check's end-to-end
table: dummy (random) weights of a model shape, bf16, the same workloads.

  transformers_peer.py [--shape llama-3-8b] [--no-compile]

Two ways of running it, each line printed as "transformers SHAPE MODE: WORKLOAD: VALUE":
  eager     model.generate with its dynamic cache (decode ms/step from the
            generate time less one prefill), and one eager forward of 1,024 tokens;
  compile   a static KV cache and a decode step compiled with torch.compile
            (mode reduce-overhead: Inductor kernels replayed as a CUDA graph),
            greedy argmax inside the step, as gpt-fast runs it; the prefill is
            compiled too (default mode). Compile time is printed, not counted.
"""
import argparse
import inspect
import sys
import time

import torch

SHAPES = {
    "llama-3-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0),
    "llama-3.2-1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0,
                         tie_word_embeddings=True),
}
# (batch, prompt, new tokens) of the decode rows.
DECODES = ((1, 128, 128), (8, 128, 64), (64, 512, 32))


def ms_of(fn, reps):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps * 1e3


def static_cache(cfg, batch, length):
    from transformers import StaticCache
    params = inspect.signature(StaticCache.__init__).parameters
    kw = {"config": cfg, "max_cache_len": length}
    if "max_batch_size" in params:
        kw["max_batch_size"] = batch
    if "device" in params:
        kw["device"] = "cuda"
    if "dtype" in params:
        kw["dtype"] = torch.bfloat16
    return StaticCache(**kw)


def eager(model, cfg, say):
    say("eager", "prefill 1024, batch 1 (ms)",
        ms_of(lambda: model(torch.randint(0, cfg.vocab_size, (1, 1024), device="cuda")), 5))
    for batch, prompt, n_new in DECODES:
        ids = torch.randint(0, cfg.vocab_size, (batch, prompt), device="cuda")
        gen = ms_of(lambda: model.generate(ids, max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False,
                                           pad_token_id=0), 1)
        pre = ms_of(lambda: model(ids), 1)
        say("eager", f"decode batch {batch}, prompt {prompt} (ms/step)", (gen - pre) / n_new)


def compiled(model, cfg, say):
    def step(tok, pos, cache):
        out = model(input_ids=tok, cache_position=pos, past_key_values=cache, use_cache=True)
        return out.logits[:, -1].argmax(-1, keepdim=True)

    decode = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    for batch, prompt, n_new in DECODES:
        cache = static_cache(cfg, batch, prompt + n_new + 8)
        ids = torch.randint(0, cfg.vocab_size, (batch, prompt), device="cuda")
        tok = step(ids, torch.arange(prompt, device="cuda"), cache)  # eager prefill fills the cache

        def run(n, first):
            t = tok
            for i in range(n):
                torch.compiler.cudagraph_mark_step_begin()
                t = decode(t, torch.tensor([first + i], device="cuda"), cache).clone()
            return t

        t0 = time.perf_counter()
        run(3, prompt)  # compile and capture (positions are overwritten below)
        torch.cuda.synchronize()
        say("compile", f"decode batch {batch}: compile and capture (s)", time.perf_counter() - t0)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        run(n_new, prompt)
        torch.cuda.synchronize()
        say("compile", f"decode batch {batch}, prompt {prompt} (ms/step)", (time.perf_counter() - t0) * 1e3 / n_new)
        del cache
    prefill = torch.compile(lambda ids: model(ids).logits[:, -1].argmax(-1))
    ids = torch.randint(0, cfg.vocab_size, (1, 1024), device="cuda")
    t0 = time.perf_counter()
    prefill(ids)
    torch.cuda.synchronize()
    say("compile", "prefill 1024: compile (s)", time.perf_counter() - t0)
    say("compile", "prefill 1024, batch 1 (ms)", ms_of(lambda: prefill(ids), 5))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="llama-3-8b", choices=sorted(SHAPES))
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**SHAPES[a.shape], max_position_embeddings=8192, rms_norm_eps=1e-5)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()

    def say(mode, name, v):
        print(f"transformers {a.shape} {mode}: {name}: {v:.2f}", flush=True)

    with torch.no_grad():
        eager(model, cfg, say)
        if not a.no_compile:
            try:
                compiled(model, cfg, say)
            except Exception as e:  # report it; the eager rows stand
                print(f"transformers {a.shape} compile: failed: {type(e).__name__}: {e}"[:400], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
