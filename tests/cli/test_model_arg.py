"""The model as a positional argument: `nanoserve serve MODEL`, `generate
MODEL`, `bench MODEL`, `inspect MODEL`, a .gguf file or a Hugging Face
folder; -m still works; both, or two positionals, is an error naming them.
The models are the tiny family fixtures (tests/fixtures/families), which load
in milliseconds."""
import os
import re
import subprocess
import time

import pytest
import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.path.join(ROOT, "build", "nanoserve")
FAMILIES = os.path.join(ROOT, "tests", "fixtures", "families")
QWEN2_GGUF = os.path.join(FAMILIES, "qwen2", "model.gguf")
PHI3_HF = os.path.join(FAMILIES, "phi3", "hf")
SMALL = ["--threads", "1", "--max-model-len", "64", "--kv-cache-memory", "16M"]


def run(*args, timeout=120):
    assert os.path.exists(BINARY), "build nanoserve first (scripts/build)"
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("model", [QWEN2_GGUF, PHI3_HF], ids=["gguf", "hf-folder"])
def test_generate_takes_a_positional_model(model):
    positional = run("generate", model, "-p", "The quick brown", "-n", "6", "--temperature", "0", *SMALL)
    assert positional.returncode == 0, positional.stderr
    flag = run("generate", "-m", model, "-p", "The quick brown", "-n", "6", "--temperature", "0", *SMALL)
    assert flag.returncode == 0, flag.stderr
    assert positional.stdout == flag.stdout and positional.stdout.strip()


def test_inspect_takes_a_positional_model_and_m():
    for args in ([QWEN2_GGUF], ["-m", QWEN2_GGUF]):
        r = run("inspect", "--no-tensors", *args)
        assert r.returncode == 0, r.stderr
        assert "architecture: qwen2" in r.stdout
        assert "beyond llama: q/k/v biases" in r.stdout


def test_bench_takes_a_positional_model():
    r = run("bench", QWEN2_GGUF, "--num-prompts", "2", "--input-len", "8", "--output-len", "4", *SMALL)
    assert r.returncode == 0, r.stderr
    assert "tok/s" in r.stdout or "tokens/s" in r.stdout, r.stdout


@pytest.mark.parametrize("command", ["generate", "serve", "bench", "inspect"])
def test_model_given_twice_is_an_error_naming_both(command):
    both = run(command, QWEN2_GGUF, "-m", PHI3_HF)
    assert both.returncode == 2
    assert f"MODEL '{QWEN2_GGUF}' and -m '{PHI3_HF}'" in both.stderr, both.stderr
    two = run(command, QWEN2_GGUF, PHI3_HF)
    assert two.returncode == 2
    assert f"two models given: '{QWEN2_GGUF}' and '{PHI3_HF}'" in two.stderr, two.stderr


def test_serve_takes_a_positional_model():
    proc = subprocess.Popen([BINARY, "serve", QWEN2_GGUF, "--port", "0", *SMALL], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert m, f"no listening line: {line!r}"
        url = f"http://127.0.0.1:{m.group(1)}"
        for _ in range(200):
            try:
                if requests.get(url + "/health", timeout=5).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.05)
        # The served name is the file's stem, as with -m.
        assert requests.get(url + "/v1/models", timeout=5).json()["data"][0]["id"] == "model"
        r = requests.post(url + "/v1/completions", json={"model": "model", "prompt": "The quick", "max_tokens": 4,
                                                          "temperature": 0}, timeout=30)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] >= 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)
