#!/usr/bin/env python3
"""Writes two random-weight llama GGUFs of one shape for a decode-speed comparison of
weight types: one laid out as Q4_K_M lays out a model (Q4_K, with Q6_K for attn_v,
ffn_down and the tied embeddings), one all Q4_1. The tokenizer and its metadata are
the default model's; the weights are random blocks (random quant and scale bytes,
f16 scales fixed small), so the text is noise but the work per token is real.

    .venv/bin/python bench/make_kquant_model.py /tmp/kq_models
    build/nanoserve bench /tmp/kq_models/random-q4_k_m.gguf --num-prompts 1 --input-len 16 --output-len 64
    build/nanoserve bench /tmp/kq_models/random-q4_1.gguf  --num-prompts 1 --input-len 16 --output-len 64

Shape: dim 1024, ffn 4096, 8 layers, 16 heads / 4 KV heads, vocab 49152 (every row a
whole number of K-quant super-blocks, unlike SmolLM2-135M's 576-wide ones).
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFWriter, GGUFValueType

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DIM, FFN, LAYERS, HEADS, KV_HEADS = 1024, 4096, 8, 16, 4
BLOCK = {Q.Q4_K: (256, 144, (0, 2)), Q.Q6_K: (256, 210, (208,)), Q.Q4_1: (32, 20, (0, 2))}


def random_blocks(rng, qtype, rows, cols):
    elems, nbytes, f16_fields = BLOCK[qtype]
    n_blocks = rows * cols // elems
    b = rng.integers(0, 256, size=(n_blocks, nbytes), dtype=np.uint8)
    for off in f16_fields:
        b[:, off:off + 2] = np.full(n_blocks, 2e-4 if qtype != Q.Q4_1 else 5e-3, np.float16).view(np.uint8).reshape(-1, 2)
    return b.reshape(rows, cols // elems * nbytes)


def write(path, types):
    src = GGUFReader(DEFAULT)
    w = GGUFWriter(path, "llama")
    for field in src.fields.values():
        name = field.name
        if not name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == GGUFValueType.ARRAY:
            sub = field.types[-1]
            if sub == GGUFValueType.STRING:
                vals = [bytes(field.parts[i]).decode("utf-8", "surrogateescape") for i in field.data]
            else:
                vals = [field.parts[i].tolist()[0] for i in field.data]
            w.add_array(name, vals)
        elif vtype == GGUFValueType.STRING:
            w.add_string(name, bytes(field.parts[field.data[0]]).decode("utf-8"))
        else:
            w.add_key_value(name, field.parts[field.data[0]].tolist()[0], vtype)
    w.add_block_count(LAYERS)
    w.add_context_length(2048)
    w.add_embedding_length(DIM)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    rng = np.random.default_rng(7)
    vocab = len(src.fields["tokenizer.ggml.tokens"].data)
    kv = DIM // HEADS * KV_HEADS

    def mat(name, rows, cols, qtype):
        w.add_tensor(name, random_blocks(rng, qtype, rows, cols), raw_dtype=qtype)

    def vec(name):
        w.add_tensor(name, np.ones(DIM, np.float32))

    mat("token_embd.weight", vocab, DIM, types["embd"])
    vec("output_norm.weight")
    for l in range(LAYERS):
        p = f"blk.{l}."
        vec(p + "attn_norm.weight")
        vec(p + "ffn_norm.weight")
        mat(p + "attn_q.weight", DIM, DIM, types["main"])
        mat(p + "attn_k.weight", kv, DIM, types["main"])
        mat(p + "attn_v.weight", kv, DIM, types["v_down"])
        mat(p + "attn_output.weight", DIM, DIM, types["main"])
        mat(p + "ffn_gate.weight", FFN, DIM, types["main"])
        mat(p + "ffn_up.weight", FFN, DIM, types["main"])
        mat(p + "ffn_down.weight", DIM, FFN, types["v_down"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/kq_models"
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "random-q4_k_m.gguf"), {"embd": Q.Q6_K, "main": Q.Q4_K, "v_down": Q.Q6_K})
    write(os.path.join(out, "random-q4_1.gguf"), {"embd": Q.Q4_1, "main": Q.Q4_1, "v_down": Q.Q4_1})
    print("wrote", out, file=sys.stderr)


if __name__ == "__main__":
    main()
