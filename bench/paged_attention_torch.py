#!/usr/bin/env python3
"""Torch SDPA beside nanoserve's CUDA paged attention, on the GPU machine.

1. --dump DIR: a batch written by paged_attention_cuda_bench --dump (paged
   pools, block tables, positions, q and our bf16 output). Gathers each
   sequence's history into contiguous K/V and runs
   torch.nn.functional.scaled_dot_product_attention (f32, causal mask from the
   positions, enable_gqa) on the same data; prints the relative error of our
   output per token row and fails above 1e-2.
2. --csv FILE: our timings. Times SDPA over contiguous KV [B, n_kv, L, D] bf16
   on the same shapes, the same way (a CUDA graph of 20 calls cycling over
   copies of K/V larger than 4x L2, median of 25 replays), and prints the
   combined table: shape, us, TB/s, % of the 4.24 TB/s copy ceiling.
"""
import argparse
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

CEILING_TBS = 4.24
CALLS_PER_GRAPH = 20
REPLAYS = 25


def load_dump(d):
    meta = {}
    with open(os.path.join(d, "meta.txt")) as f:
        for line in f:
            k, v = line.split()
            meta[k] = int(v)

    def arr(name, dtype):
        return np.fromfile(os.path.join(d, name), dtype=dtype)

    def bf16(name, shape):
        raw = torch.from_numpy(arr(name, np.int16).copy())
        return raw.view(torch.bfloat16).reshape(shape)

    m = meta
    pool_shape = (m["num_blocks"], m["block_size"], m["n_kv_heads"], m["head_dim"])
    qo_shape = (m["num_tokens"], m["n_heads"], m["head_dim"])
    return m, {
        "k_pool": bf16("k_pool.bin", pool_shape),
        "v_pool": bf16("v_pool.bin", pool_shape),
        "q": bf16("q.bin", qo_shape),
        "out": bf16("out.bin", qo_shape),
        "block_tables": torch.from_numpy(arr("block_tables.bin", np.int32).astype(np.int64)).reshape(
            m["num_seqs"], m["max_blocks_per_seq"]),
        "seq_starts": arr("seq_starts.bin", np.int32),
        "positions": arr("positions.bin", np.int32),
    }


def check_dump(d):
    m, t = load_dump(d)
    dev = "cuda"
    bs, hd = m["block_size"], m["head_dim"]
    k_pool = t["k_pool"].to(dev).float()
    v_pool = t["v_pool"].to(dev).float()
    q_all = t["q"].to(dev).float()
    ours = t["out"].to(dev).float()
    assert not torch.isnan(ours).any(), "NaN in our output"
    worst = 0.0
    worst_bf16_sdpa = 0.0
    for b in range(m["num_seqs"]):
        s0, s1 = int(t["seq_starts"][b]), int(t["seq_starts"][b + 1])
        if s1 == s0:
            continue
        pos = torch.from_numpy(t["positions"][s0:s1].astype(np.int64)).to(dev)
        ctx = int(pos.max()) + 1
        p = torch.arange(ctx, device=dev)
        slots = t["block_tables"][b].to(dev)[p // bs] * bs + p % bs
        k = k_pool.reshape(-1, m["n_kv_heads"], hd)[slots].permute(1, 0, 2).unsqueeze(0)  # [1, n_kv, ctx, D]
        v = v_pool.reshape(-1, m["n_kv_heads"], hd)[slots].permute(1, 0, 2).unsqueeze(0)
        q = q_all[s0:s1].permute(1, 0, 2).unsqueeze(0)  # [1, H, n, D]
        mask = p.unsqueeze(0) <= pos.unsqueeze(1)  # [n, ctx]
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        ref = ref.squeeze(0).permute(1, 0, 2)  # [n, H, D]
        ref16 = F.scaled_dot_product_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), attn_mask=mask,
                                               enable_gqa=True).squeeze(0).permute(1, 0, 2).float()
        for i in range(s1 - s0):
            r = ref[i].flatten().double()
            rel = ((ours[s0 + i].flatten().double() - r).norm() / r.norm()).item()
            rel16 = ((ref16[i].flatten().double() - r).norm() / r.norm()).item()
            worst = max(worst, rel)
            worst_bf16_sdpa = max(worst_bf16_sdpa, rel16)
        print(f"  sequence {b}: {s1 - s0} query tokens, context {ctx}")
    ok = worst <= 1e-2
    print(f"torch SDPA check: ours vs SDPA(f32) worst relative error per row {worst:.2e} "
          f"(SDPA in bf16 vs SDPA(f32): {worst_bf16_sdpa:.2e}) -> {'PASS' if ok else 'FAIL'}")
    return ok


def time_sdpa(batch, ctx, n_heads, n_kv, hd):
    dev = "cuda"
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    kv_bytes = 2 * batch * ctx * n_kv * hd * 2
    copies = max(1, -(-4 * l2 // kv_bytes))
    g = torch.Generator(device=dev).manual_seed(batch * 100003 + ctx)

    def rnd(*shape):
        return (torch.rand(*shape, device=dev, generator=g) * 2 - 1).to(torch.bfloat16)

    q = rnd(batch, n_heads, 1, hd)
    ks = [rnd(batch, n_kv, ctx, hd) for _ in range(copies)]
    vs = [rnd(batch, n_kv, ctx, hd) for _ in range(copies)]
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for c in range(copies):
            out = F.scaled_dot_product_attention(q, ks[c], vs[c], enable_gqa=True)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=s):
            for i in range(CALLS_PER_GRAPH):
                out = F.scaled_dot_product_attention(q, ks[i % copies], vs[i % copies], enable_gqa=True)
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(REPLAYS):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(s)
            graph.replay()
            b.record(s)
            b.synchronize()
            times.append(a.elapsed_time(b))
    del out
    times.sort()
    us = 1000.0 * times[len(times) // 2] / CALLS_PER_GRAPH
    nbytes = kv_bytes + 2 * batch * n_heads * hd * 2
    return us, nbytes / (us * 1e-6) / 1e12


def table(csv_path):
    import csv
    rows = list(csv.DictReader(open(csv_path)))
    sdpa = {}
    for r in rows:
        key = (int(r["batch"]), int(r["ctx"]), int(r["n_heads"]), int(r["n_kv"]), int(r["head_dim"]))
        if key not in sdpa:
            sdpa[key] = time_sdpa(*key)
    copy = float(rows[0]["copy_tbs"]) if rows else 0.0
    print()
    print(f"paged decode attention, GQA 32/8, head_dim 128, bf16 "
          f"({torch.cuda.get_device_name(0)}; copy measured now {copy:.2f} TB/s; "
          f"% is of the {CEILING_TBS} TB/s copy ceiling)")
    print(f"| {'shape':<16} | {'variant':<14} | {'ours us':>8} | {'ours TB/s':>9} | {'% ceil':>6} "
          f"| {'SDPA us':>8} | {'SDPA TB/s':>9} | {'% ceil':>6} |")
    print("|" + "-" * 18 + "|" + "-" * 16 + "|" + "-" * 10 + "|" + "-" * 11 + "|" + "-" * 8 + "|" + "-" * 10 + "|"
          + "-" * 11 + "|" + "-" * 8 + "|")
    for r in rows:
        key = (int(r["batch"]), int(r["ctx"]), int(r["n_heads"]), int(r["n_kv"]), int(r["head_dim"]))
        us, tbs = float(r["us"]), float(r["tbs"])
        sus, stbs = sdpa[key]
        print(f"| {r['shape']:<16} | {r['variant']:<14} | {us:8.2f} | {tbs:9.2f} | {100 * tbs / CEILING_TBS:5.1f}% "
              f"| {sus:8.2f} | {stbs:9.2f} | {100 * stbs / CEILING_TBS:5.1f}% |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump")
    ap.add_argument("--csv")
    args = ap.parse_args()
    ok = True
    if args.dump:
        ok = check_dump(args.dump)
    if args.csv:
        table(args.csv)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
