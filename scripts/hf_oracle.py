#!/usr/bin/env python3
"""The end-to-end oracle for the CUDA model: a small random model of each
family (GQA, head_dim 64, the default model's vocabulary size) run by HF
transformers on the GPU, saved as an HF folder that nanoserve loads.

  hf_oracle.py make OUT_DIR [--family F ...] [--tokenizer-json FILE] [--device cpu]
      for each family F (default: all of llama, mistral, qwen2, qwen3, phi3,
      mistral_window, gemma2, gemma3)
      writes OUT_DIR/F/{config.json, model.safetensors, tokenizer.json} and
      OUT_DIR/F/oracle.json: prompts (token ids), transformers' logits at every
      position (f32 file oracle_logits.f32, rows in prompt order), its greedy
      continuations with each step's top-2 margin, and the logits of the same
      model with the family's planted error (planted_logits.f32):
        llama    the attention scale 3% off
        mistral  a wrong rope theta (10,000 for its 1,000,000)
        qwen2    the q, k and v biases dropped
        qwen3    the per-head q/k norms off
        phi3     gate and up swapped in the fused gate_up
        mistral_window  mistral with a sliding window of 4 positions (eager
                 attention, which keeps q - k < 4), planted: a window of 5
        gemma2   head_dim 256, every other layer local (window 4), attention
                 soft-cap 5 and final soft-cap 10 (small enough to bite),
                 planted: no attention soft-cap
        gemma3   head_dim 256, q/k norms, three local layers (window 4, theta
                 10,000) and a global one (theta 1,000,000, linear scaling x 8),
                 planted: a window of 5
        qwen3moe 16 experts of ffn 256, top-4, norm_topk_prob; planted: top-3
        mixtral  8 experts of ffn 256, top-2; planted: top-1
      A forward that is right must sit near the first and far from the second.
      For the mixtures of experts, the prompts are drawn token by token so
      that every position's least gap over the layers between the k-th and
      (k+1)-th router logit is at least 0.1 (router_margins: those gaps),
      and transformers' experts and their weights are recorded per layer and
      position (routing, routing_weights).
      --device cpu runs transformers on the CPU (slow: minutes a family),
      to check the script and the CPU forward where no GPU is.
      And the same two for FP8 weights (fp8_logits.f32, fp8_planted_logits.f32):
      every linear of the layers quantized as nanoserve's --quantization fp8
      does (per output row: scale = max |w| / 448, E4M3 of w / scale, then
      times the scale, in f32), and its input a token the same way (E4M3 of
      x / (max |x| / 448)), the plant being the odd rows' scales x 1.1
      and the even rows' / 1.1 (not for
      the mixtures of experts, whose experts run in bf16 only on CUDA).

Every weight that a family reads, norms and biases included, is random (the
default init leaves norms at one and biases at zero, where a dropped or
misplaced one would not show).

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


DEVICE = "cuda"  # --device cpu checks the script (and the CPU forward) where no GPU is
FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "phi3", "mistral_window", "gemma2", "gemma3", "qwen3moe", "mixtral"]
MOE_FAMILIES = ["qwen3moe", "mixtral"]
# The least gap between a position's k-th and (k+1)-th router logit, in every
# layer, for the mixtures' prompts (tests/model/moe_cuda_test.cc's kClearMargin).
ROUTER_MARGIN = 0.1
WINDOW = 4

COMMON = dict(vocab_size=49152, hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
              num_attention_heads=8, num_key_value_heads=2, rms_norm_eps=1e-5, bos_token_id=1,
              eos_token_id=2, initializer_range=0.06)


def tiny_model(family):
    import transformers as tf

    if family == "llama":
        cfg = tf.LlamaConfig(**COMMON, head_dim=64, max_position_embeddings=131072, rope_theta=500000.0,
                             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                             tie_word_embeddings=False, attention_bias=False, mlp_bias=False)
        return tf.LlamaForCausalLM(cfg)
    if family == "mistral":
        cfg = tf.MistralConfig(**COMMON, head_dim=64, max_position_embeddings=32768, rope_theta=1000000.0,
                               sliding_window=None, tie_word_embeddings=False)
        return tf.MistralForCausalLM(cfg)
    if family == "mistral_window":
        cfg = tf.MistralConfig(**COMMON, head_dim=64, max_position_embeddings=32768, rope_theta=1000000.0,
                               sliding_window=WINDOW, tie_word_embeddings=False)
        cfg._attn_implementation = "eager"
        return tf.MistralForCausalLM(cfg)
    if family == "qwen2":
        cfg = tf.Qwen2Config(**COMMON, max_position_embeddings=32768, rope_theta=1000000.0,
                             use_sliding_window=False, tie_word_embeddings=True)
        return tf.Qwen2ForCausalLM(cfg)
    if family == "qwen3":
        cfg = tf.Qwen3Config(**COMMON, head_dim=64, max_position_embeddings=40960, rope_theta=1000000.0,
                             use_sliding_window=False, tie_word_embeddings=True, attention_bias=False)
        return tf.Qwen3ForCausalLM(cfg)
    if family in ("gemma2", "gemma3"):
        return gemma_model(tf, family)
    if family == "phi3":
        cfg = tf.Phi3Config(**COMMON, max_position_embeddings=4096, original_max_position_embeddings=4096,
                            rope_theta=10000.0, rope_scaling=None, tie_word_embeddings=False,
                            pad_token_id=0)
        return tf.Phi3ForCausalLM(cfg)
    if family == "qwen3moe":
        cfg = tf.Qwen3MoeConfig(**COMMON, head_dim=64, max_position_embeddings=40960, rope_theta=1000000.0,
                                moe_intermediate_size=256, num_experts=16, num_experts_per_tok=4,
                                norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                                use_sliding_window=False, tie_word_embeddings=False, attention_bias=False)
        return tf.Qwen3MoeForCausalLM(cfg)
    if family == "mixtral":
        moe = dict(COMMON, intermediate_size=256)
        cfg = tf.MixtralConfig(**moe, head_dim=64, max_position_embeddings=32768, rope_theta=1000000.0,
                               num_local_experts=8, num_experts_per_tok=2, sliding_window=None,
                               tie_word_embeddings=False)
        return tf.MixtralForCausalLM(cfg)
    raise ValueError(family)


def gemma_model(tf, family):
    """Gemma at head_dim 256 (every real Gemma 2 and 3 but 27B), 4 layers."""
    major = int(tf.__version__.split(".")[0])
    common = dict(COMMON, num_attention_heads=4, num_key_value_heads=2, head_dim=256, query_pre_attn_scalar=256,
                  rms_norm_eps=1e-6, sliding_window=WINDOW, hidden_activation="gelu_pytorch_tanh",
                  tie_word_embeddings=True, max_position_embeddings=8192)
    if family == "gemma2":
        rope = ({"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}} if major >= 5
                else {"rope_theta": 10000.0})
        cfg = tf.Gemma2Config(**common, attn_logit_softcapping=5.0, final_logit_softcapping=10.0, **rope)
        model_class = tf.Gemma2ForCausalLM
    else:
        types = ["sliding_attention"] * 3 + ["full_attention"]
        if major >= 5:
            rope = {"rope_parameters": {
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}
        else:
            rope = {"rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                    "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
        # layer_types, and for transformers 4.5x (which reads only the
        # pattern) sliding_window_pattern 4: layers 0-2 local, 3 global.
        cfg = tf.Gemma3TextConfig(**common, layer_types=types, sliding_window_pattern=4,
                                  attn_logit_softcapping=None, final_logit_softcapping=None, **rope)
        model_class = tf.Gemma3ForCausalLM
    cfg._attn_implementation = "eager"  # soft-caps and windows as the reference writes them
    return model_class(cfg)


def global_rotary(model):
    """The global layers' rotary frequencies and attention scaling (Gemma 3
    keeps one set a layer type in recent transformers)."""
    rot = model.model.rotary_emb
    inv_freq = getattr(rot, "inv_freq", None)
    if inv_freq is None:
        inv_freq = getattr(rot, "full_attention_inv_freq")
    scaling = getattr(rot, "attention_scaling", None)
    if not isinstance(scaling, (int, float)):
        scaling = getattr(rot, "full_attention_attention_scaling", 1.0)
    return inv_freq.float().cpu().tolist(), float(scaling)


def randomize_norms_and_biases(model, g):
    """Norm weights around one and biases around zero, drawn, not left at their init."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and "norm" in name:
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1 and name.endswith("bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))


def quantize_tokens_fp8(module, args):
    """A linear's input as nanoserve's FP8 linears take it: each token's row
    as E4M3 codes times max |row| / 448 (1 for a zero row)."""
    x = args[0]
    xf = x.float()
    amax = xf.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    return ((xf / scale).to(torch.float8_e4m3fn).float() * scale).to(x.dtype),


def quantize_fp8(model, scale_error=1.0):
    """Every linear of the layers as FP8 E4M3 rows times their scales, in place,
    its input quantized a token (quantize_tokens_fp8); scale_error multiplies
    the odd rows' scales and divides the even rows' (a per-channel error,
    which no norm after the linear can undo)."""
    with torch.no_grad():
        for layer in model.model.layers:
            for mod in layer.modules():
                if isinstance(mod, torch.nn.Linear):
                    mod.register_forward_pre_hook(quantize_tokens_fp8)
                    w = mod.weight.float()
                    amax = w.abs().amax(dim=1, keepdim=True)
                    scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
                    q = (w / scale).to(torch.float8_e4m3fn).float()
                    err = torch.full_like(scale, 1.0 / scale_error)
                    err[1::2] = scale_error
                    mod.weight.copy_(q * (scale * err))


def router_logits(model, batch):
    """Each layer's router logits over a batch of equal-length sequences,
    f32 [sequences, positions, experts]."""
    res = model(torch.tensor(batch, device=DEVICE), output_router_logits=True)
    return [rl.float().reshape(len(batch), len(batch[0]), -1) for rl in res.router_logits]


def routing_gaps(model, logits):
    """Per sequence and position, the least gap over the layers between the
    k-th and (k+1)-th router logit (logits: router_logits')."""
    k = model.config.num_experts_per_tok
    gaps = []
    for rl in logits:
        top = torch.topk(rl, k + 1, dim=-1).values
        gaps.append(top[..., k - 1] - top[..., k])
    return torch.stack(gaps).min(0).values.cpu()


def expert_choices(model, logits):
    """Per layer, the experts transformers takes for each position of one
    prompt (logits: router_logits' of it alone), highest first, and their
    weights (the softmax's top_k, over their sum where the family
    normalizes): [layer][t * top_k + r] each. The CUDA test forces these on
    its forward (CudaModel::set_forced_routing): bf16 activations move these
    tiny models' router logits (a spread of ~4, from routers 3x their init)
    by 0.03-0.2 at the median in a bf16 copy, which flips experts where gaps
    are small and moves the weights by a few percent everywhere (exp of the
    logits' error): far past the bound."""
    k = model.config.num_experts_per_tok
    normalize = getattr(model.config, "norm_topk_prob", True)
    experts, weights = [], []
    for rl in logits:
        top = torch.topk(torch.softmax(rl[0], dim=-1), k, dim=-1)
        w = top.values / top.values.sum(-1, keepdim=True) if normalize else top.values
        experts.append(top.indices.reshape(-1).tolist())
        weights.append(w.reshape(-1).tolist())
    return experts, weights


def clear_routing_prompt(model, n, g, candidates=8, tries=16):
    """A random prompt of n tokens whose every position routes clearly: each
    next token is drawn from candidates whose routing gap (routing_gaps) is at
    least ROUTER_MARGIN in every layer. A position's routing reads only the
    tokens up to it, so the prompt's earlier positions stay clear. The CUDA
    test forces transformers' experts (expert_choices); these prompts keep
    the CPU forward (f32) and the free-running GPU forward it prints beside
    away from ties."""
    ids = []
    with torch.no_grad():
        for _ in range(n):
            for _ in range(tries):
                cands = torch.randint(3, model.config.vocab_size, (candidates,), generator=g).tolist()
                gaps = routing_gaps(model, router_logits(model, [ids + [c] for c in cands]))[:, -1]
                ok = (gaps >= ROUTER_MARGIN).nonzero()
                if len(ok) > 0:
                    ids.append(cands[int(ok[0])])
                    break
            else:
                raise RuntimeError(f"no token of {candidates * tries} routes clearly after {len(ids)} tokens")
    return ids


def write_logits(model, prompts, path):
    with open(path, "wb") as f, torch.no_grad():
        for ids in prompts:
            f.write(model(torch.tensor([ids], device=DEVICE)).logits[0].float().cpu().numpy().tobytes())


def plant(family, model):
    """The family's planted error, in place; returns its description."""
    with torch.no_grad():
        if family == "llama":
            for layer in model.model.layers:
                layer.self_attn.scaling *= 1.03
            return "attention scale x 1.03"
        if family == "mistral":
            rot = model.model.rotary_emb
            d = rot.inv_freq.numel() * 2
            rot.inv_freq.copy_(1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32,
                                                                 device=rot.inv_freq.device) / d)))
            if hasattr(rot, "original_inv_freq"):
                rot.original_inv_freq = rot.inv_freq.clone()
            return "rope theta 10000 instead of 1000000"
        if family == "gemma2":
            model.config.attn_logit_softcapping = None
            for layer in model.model.layers:
                layer.self_attn.attn_logit_softcapping = None
            return "no attention soft-cap"
        if family in ("mistral_window", "gemma3"):
            model.config.sliding_window = WINDOW + 1
            for layer in model.model.layers:
                if hasattr(layer.self_attn, "sliding_window"):
                    layer.self_attn.sliding_window = WINDOW + 1
            return f"sliding window {WINDOW + 1} instead of {WINDOW}"
        if family == "qwen2":
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.zero_()
            return "q, k, v biases dropped"
        if family == "qwen3":
            for layer in model.model.layers:
                layer.self_attn.q_norm = torch.nn.Identity()
                layer.self_attn.k_norm = torch.nn.Identity()
            return "q/k norms off"
        if family == "phi3":
            for layer in model.model.layers:
                w = layer.mlp.gate_up_proj.weight
                half = w.shape[0] // 2
                w.copy_(torch.cat([w[half:], w[:half]]))
            return "gate and up swapped"
        if family in MOE_FAMILIES:
            # Every module that holds the router's top_k (the sparse block, its
            # router: the attribute moved between transformers versions).
            found = 0
            for layer in model.model.layers:
                block = getattr(layer, "mlp", None) or getattr(layer, "block_sparse_moe")
                for mod in {id(m): m for m in block.modules()}.values():
                    if isinstance(getattr(mod, "top_k", None), int):
                        mod.top_k -= 1
                        found += 1
            assert found > 0, "no top_k attribute in the sparse blocks"
            model.config.num_experts_per_tok -= 1
            return f"router top-k {model.config.num_experts_per_tok} instead of {model.config.num_experts_per_tok + 1}"
    raise ValueError(family)


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


def make(out_dir, family, tokenizer_json):
    torch.manual_seed(1234)
    os.makedirs(out_dir, exist_ok=True)
    model = tiny_model(family)
    cfg = model.config
    randomize_norms_and_biases(model, torch.Generator().manual_seed(99))
    if family in MOE_FAMILIES:
        # Routers 3x their init: the router logits spread (std ~1), so that few
        # tokens' k-th and (k+1)-th experts nearly tie (at init the median gap is 0.06).
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("mlp.gate.weight") or name.endswith("block_sparse_moe.gate.weight"):
                    p.mul_(3.0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    # Saved from a copy: a round trip of the model itself through bf16 would
    # also round its rotary frequencies (a buffer), and the reference with them.
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(out_dir, safe_serialization=True)
    model = model.to(DEVICE).eval()
    if tokenizer_json:
        with open(tokenizer_json, "rb") as f, open(os.path.join(out_dir, "tokenizer.json"), "wb") as g:
            g.write(f.read())
    else:
        write_byte_tokenizer(os.path.join(out_dir, "tokenizer.json"))
    g = torch.Generator().manual_seed(7)
    lengths = [1, 17, 97, 300]
    if family in MOE_FAMILIES:
        prompts = [clear_routing_prompt(model, n, g) for n in lengths]
    else:
        prompts = [torch.randint(3, cfg.vocab_size, (n,), generator=g).tolist() for n in lengths]
    logits_path = os.path.join(out_dir, "oracle_logits.f32")
    greedy = []
    with open(logits_path, "wb") as f, torch.no_grad():
        for ids in prompts:
            x = torch.tensor([ids], device=DEVICE)
            out = model(x).logits[0].float().cpu()
            f.write(out.numpy().tobytes())
            # Greedy continuation, 24 tokens, with each step's top-2 margin.
            seq, margins = list(ids), []
            for _ in range(24):
                last = model(torch.tensor([seq], device=DEVICE)).logits[0, -1].float()
                top = torch.topk(last, 2)
                margins.append(float(top.values[0] - top.values[1]))
                seq.append(int(top.indices[0]))
            greedy.append({"tokens": seq[len(ids):], "margins": margins})
    for name, scale_error in () if family in MOE_FAMILIES else (("fp8_logits.f32", 1.0),
                                                                 ("fp8_planted_logits.f32", 1.10)):
        q = copy.deepcopy(model)
        quantize_fp8(q, scale_error)
        write_logits(q, prompts, os.path.join(out_dir, name))
        del q
    # Mixtures of experts: per position, the smallest gap over the layers
    # between the k-th and (k+1)-th router logit; and per layer, the experts
    # and weights transformers takes, which the CUDA test forces.
    router_margins, routing, routing_weights = [], [], []
    if family in MOE_FAMILIES:
        with torch.no_grad():
            for ids in prompts:
                logits = router_logits(model, [ids])
                router_margins.append(routing_gaps(model, logits)[0].tolist())
                experts, weights = expert_choices(model, logits)
                routing.append(experts)
                routing_weights.append(weights)
    # The rotary frequencies before the plant (mistral's changes them).
    inv_freq, attention_scaling = global_rotary(model)
    # The same model with the family's planted bug: the test checks that its
    # tolerance tells this apart from the right answer.
    planted = plant(family, model)
    write_logits(model, prompts, os.path.join(out_dir, "planted_logits.f32"))
    with open(os.path.join(out_dir, "oracle.json"), "w") as f:
        json.dump({"family": family, "vocab_size": cfg.vocab_size, "prompts": prompts, "greedy": greedy,
                   "inv_freq": inv_freq, "attention_scaling": attention_scaling,
                   "logits_file": "oracle_logits.f32", "planted_logits_file": "planted_logits.f32",
                   "fp8_logits_file": "fp8_logits.f32", "fp8_planted_logits_file": "fp8_planted_logits.f32",
                   "planted": planted, "router_margins": router_margins,
                   "routing": routing, "routing_weights": routing_weights}, f)
    print(f"hf_oracle: wrote {out_dir} ({family}, {len(prompts)} prompts, lengths {lengths}, "
          f"planted: {planted})")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("out_dir")
    m.add_argument("--family", action="append", choices=FAMILIES)
    m.add_argument("--tokenizer-json")
    m.add_argument("--device", default="cuda")
    a = ap.parse_args()
    global DEVICE
    DEVICE = a.device
    for family in a.family or FAMILIES:
        make(os.path.join(a.out_dir, family), family, a.tokenizer_json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
