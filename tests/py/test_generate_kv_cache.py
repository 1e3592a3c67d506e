"""`nanoserve generate` writes the same greedy text through the naive KV cache
and the paged one at block sizes 1, 16 and 32 (the default is paged, 16).

The prompt is longer than a block and is prefilled in chunks of 7 tokens, so
chunks start mid-block and the generated tokens cross block boundaries."""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.path.join(ROOT, "build", "nanoserve")
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPT = ("<|im_start|>user\nExplain in two sentences why the sky is blue, "
          "and then say what colour a sunset is.<|im_end|>\n<|im_start|>assistant\n")


def generate(*flags):
    assert os.path.exists(BINARY), "build nanoserve first (scripts/build)"
    r = subprocess.run([BINARY, "generate", "-m", MODEL, "-p", PROMPT, "-n", "24", "--temperature", "0",
                        "--prefill-chunk", "7", "--threads", "2", *flags],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def naive_text():
    text = generate("--kv-cache", "naive")
    assert len(text.strip()) > 0
    return text


@pytest.mark.parametrize("block_size", [1, 16, 32])
def test_paged_equals_naive(naive_text, block_size):
    assert generate("--kv-cache", "paged", "--block-size", str(block_size)) == naive_text


def test_default_flags_give_the_same_text(naive_text):
    assert generate() == naive_text


@pytest.mark.parametrize("flags", [["--kv-cache", "blocks"], ["--block-size", "0"]])
def test_bad_cache_flags_are_refused(flags):
    r = subprocess.run([BINARY, "generate", "-m", MODEL, "-p", "hi", *flags], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0
    assert flags[0] in r.stderr + r.stdout
