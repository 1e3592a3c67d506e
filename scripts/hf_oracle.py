#!/usr/bin/env python3
"""The end-to-end oracle for the CUDA model: a small random LlamaForCausalLM
(GQA, Llama-3 rope scaling, the default model's vocabulary size) run by HF
transformers on the GPU, saved as an HF folder that nanoserve loads.

  hf_oracle.py make OUT_DIR [--tokenizer-json FILE]
      writes OUT_DIR/{config.json, model.safetensors, tokenizer.json?} and
      OUT_DIR/oracle.json: prompts (token ids), transformers' logits at every
      position (f32 file oracle_logits.f32, rows in prompt order) and its greedy
      continuations with each step's top-2 margin.

The weights are rounded to bf16 and saved in bf16, and transformers computes
in f32 over those same weights, so the reference differs from nanoserve only
by nanoserve's bf16 activations and accumulation order.
"""
import argparse
import copy
import json
import os
import sys

import torch


def tiny_config():
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=49152, hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=2, head_dim=64, max_position_embeddings=131072,
        rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, initializer_range=0.06,
        attention_bias=False, mlp_bias=False)


def byte_alphabet():
    """GPT-2's printable stand-ins for the 256 byte values."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return chars


def write_byte_tokenizer(path):
    """A byte-level BPE tokenizer.json with the 256 byte tokens and no merges:
    the oracle compares token ids, so any tokenizer of at most vocab_size
    tokens lets the folder load."""
    alpha = byte_alphabet()
    vocab = {alpha[b]: b for b in range(256)}
    tok = {"version": "1.0", "added_tokens": [], "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                             "use_regex": True},
           "post_processor": None,
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                     "ignore_merges": False, "vocab": vocab, "merges": []}}
    with open(path, "w") as f:
        json.dump(tok, f)


def make(out_dir, tokenizer_json):
    from transformers import LlamaForCausalLM

    torch.manual_seed(1234)
    os.makedirs(out_dir, exist_ok=True)
    cfg = tiny_config()
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    # Saved from a copy: a round trip of the model itself through bf16 would
    # also round its rotary frequencies (a buffer), and the reference with them.
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(out_dir, safe_serialization=True)
    model = model.cuda().eval()
    if tokenizer_json:
        with open(tokenizer_json, "rb") as f, open(os.path.join(out_dir, "tokenizer.json"), "wb") as g:
            g.write(f.read())
    else:
        write_byte_tokenizer(os.path.join(out_dir, "tokenizer.json"))
    g = torch.Generator().manual_seed(7)
    lengths = [1, 17, 97, 300]
    prompts = [torch.randint(3, cfg.vocab_size, (n,), generator=g).tolist() for n in lengths]
    logits_path = os.path.join(out_dir, "oracle_logits.f32")
    greedy = []
    with open(logits_path, "wb") as f, torch.no_grad():
        for ids in prompts:
            x = torch.tensor([ids], device="cuda")
            out = model(x).logits[0].float().cpu()
            f.write(out.numpy().tobytes())
            # Greedy continuation, 24 tokens, with each step's top-2 margin.
            seq, margins = list(ids), []
            for _ in range(24):
                last = model(torch.tensor([seq], device="cuda")).logits[0, -1].float()
                top = torch.topk(last, 2)
                margins.append(float(top.values[0] - top.values[1]))
                seq.append(int(top.indices[0]))
            greedy.append({"tokens": seq[len(ids):], "margins": margins})
    # The same model with a planted bug (attention scale 3% off): the test
    # checks that its tolerance tells this apart from the right answer.
    for layer in model.model.layers:
        layer.self_attn.scaling *= 1.03
    with open(os.path.join(out_dir, "planted_logits.f32"), "wb") as f, torch.no_grad():
        for ids in prompts:
            f.write(model(torch.tensor([ids], device="cuda")).logits[0].float().cpu().numpy().tobytes())
    with open(os.path.join(out_dir, "oracle.json"), "w") as f:
        rot = model.model.rotary_emb
        json.dump({"vocab_size": cfg.vocab_size, "prompts": prompts, "greedy": greedy,
                   "inv_freq": rot.inv_freq.float().cpu().tolist(),
                   "attention_scaling": float(getattr(rot, "attention_scaling", 1.0)),
                   "logits_file": "oracle_logits.f32", "planted_logits_file": "planted_logits.f32",
                   "planted": "attention scale x 1.03"}, f)
    print(f"hf_oracle: wrote {out_dir} ({len(prompts)} prompts, lengths {lengths})")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("out_dir")
    m.add_argument("--tokenizer-json")
    a = ap.parse_args()
    make(a.out_dir, a.tokenizer_json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
