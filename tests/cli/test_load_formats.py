"""-m PATH as a GGUF file or a Hugging Face folder, --load-format and
--model-shape, end to end through the nanoserve binary. The HF folder is the
default model's export (tests/fixtures/hf/make_hf_folder.py, made under build/
by scripts/test); its tokenizer.json is checked against Hugging Face's
`tokenizers` reading the same file."""
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.path.join(ROOT, "build", "nanoserve")
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
HF = os.environ.get("NANOSERVE_HF_FIXTURE", os.path.join(ROOT, "build", "fixtures", "hf", "smollm2-135m"))
needs_hf = pytest.mark.skipif(not os.path.exists(os.path.join(HF, "config.json")),
                              reason="run tests/fixtures/hf/make_hf_folder.py (scripts/test does)")


def run(*args, timeout=300):
    assert os.path.exists(BINARY), "build nanoserve first (scripts/build)"
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout)


@needs_hf
def test_generate_from_hf_folder():
    r = run("generate", "-m", HF, "-p", "The capital of France is", "-n", "8", "--temperature", "0", "--threads", "2")
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout


@needs_hf
def test_inspect_hf_folder():
    r = run("inspect", HF)
    assert r.returncode == 0, r.stderr
    assert "Hugging Face safetensors, 2 shards, 272 tensors" in r.stdout
    assert "layers 30, dim 576, heads 9 (kv 3" in r.stdout
    assert "pre-tokenizer smollm" in r.stdout
    assert "model.layers.29.self_attn.q_proj.weight" in r.stdout


@needs_hf
def test_tokenize_matches_hf_tokenizers_on_the_same_file():
    from tokenizers import Tokenizer

    oracle = Tokenizer.from_file(os.path.join(HF, "tokenizer.json"))
    with open(os.path.join(ROOT, "tests", "fixtures", "tokenizer", "corpus.json"), encoding="utf-8") as f:
        corpus = [e["text"] for e in json.load(f) if "text" in e and e["text"] and not e["text"].startswith("-")]
    texts = corpus[::8][:48] + ["<|im_start|>user\nHi 123 4567<|im_end|>", "  leading spaces\n\n\ttabs"]
    differ = []
    for text in texts:
        r = run("tokenize", "--ids-only", "--no-bos", "-m", HF, text)
        assert r.returncode == 0, r.stderr
        got = [int(x) for x in r.stdout.split()]
        if got != oracle.encode(text, add_special_tokens=False).ids:
            differ.append(text)
    assert not differ, f"{len(differ)} of {len(texts)} differ, e.g. {differ[:3]!r}"


def test_dummy_shape_generates_with_the_default_tokenizer():
    r = run("generate", "--load-format", "dummy", "--model-shape", "smollm2-135m", "-p", "Hello", "-n", "4",
            "--ignore-eos", "--temperature", "0", "--threads", "2")
    assert r.returncode == 0, r.stderr
    assert "generated 4 tokens (length)" in r.stderr


def test_dummy_too_large_for_memory_is_refused():
    r = run("generate", "--load-format", "dummy", "--model-shape", "llama-3-8b", "-p", "Hello", "-n", "1")
    assert r.returncode == 1
    assert "the f32 weights need 30633 MiB" in r.stderr and "pick a smaller --model-shape" in r.stderr


@pytest.mark.parametrize("args,needle", [
    (["--model-shape", "llama-3-8b"], "--model-shape needs --load-format dummy"),
    (["--load-format", "dummy", "--model-shape", "gpt-5"], "unknown shape 'gpt-5' (known: llama-3-8b, llama-3.2-1b, smollm2-135m, qwen3-30b-a3b, gemma-3-12b, gpt-oss-20b)"),
    (["--load-format", "pt"], "--load-format: 'pt' is not one of auto, gguf, safetensors, dummy"),
    (["--load-format", "safetensors", "-m", MODEL], "is not a folder"),
    (["-m", "/nonexistent/model"], "no such file or folder"),
])
def test_bad_flags_name_the_flag(args, needle):
    r = run("generate", *args, "-p", "x", "-n", "1")
    assert r.returncode != 0
    assert needle in r.stderr, r.stderr
