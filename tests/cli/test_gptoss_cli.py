"""`nanoserve inspect` and `serve` take gpt-oss, from a GGUF file and from a
Hugging Face folder, with f32 and with MXFP4 experts (the tiny fixtures of
tests/fixtures/families/make_gptoss.py). The server's completion of a prompt
is the greedy continuation `nanoserve generate` gives for the same file."""
import os
import re
import subprocess
import time

import pytest
import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.path.join(ROOT, "build", "nanoserve")
FAMILIES = os.path.join(ROOT, "tests", "fixtures", "families")
SMALL = ["--threads", "1", "--max-model-len", "128", "--kv-cache-memory", "16M"]


def run(*args, timeout=120):
    assert os.path.exists(BINARY), "build nanoserve first (scripts/build)"
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("family", ["gptoss", "gptoss_mxfp4"])
@pytest.mark.parametrize("form", ["model.gguf", "hf"])
def test_inspect_shows_the_family(family, form):
    r = run("inspect", "--no-tensors", os.path.join(FAMILIES, family, form))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    if form == "hf":
        assert "arch gpt-oss" in out and "attention sinks" in out and "clamped SwiGLU" in out, out
        assert "rope scaling yarn x32" in out and "sliding window 4 (1 of 2 layers)" in out, out
    else:
        assert "architecture: gpt-oss" in out, out
        assert "scaling yarn x32 over 64 positions" in out and "q and k x 1.34657" in out, out
        assert "attention sinks" in out and "o bias" in out, out
        assert "softmax over the top-k logits, clamped SwiGLU (alpha 1.702, limit 7)" in out, out
        assert "sliding window 4 in 1 of 2 layers" in out, out
    if family == "gptoss_mxfp4" and form == "model.gguf":
        tensors = run("inspect", os.path.join(FAMILIES, family, form))
        assert tensors.returncode == 0, tensors.stderr
        assert re.search(r"blk\.0\.ffn_gate_exps\.weight.*MXFP4", tensors.stdout), tensors.stdout


@pytest.mark.parametrize("family,form", [("gptoss", "model.gguf"), ("gptoss_mxfp4", "hf")])
def test_serve_completes_as_generate_does(family, form):
    path = os.path.join(FAMILIES, family, form)
    prompt = "Once upon a time, there was"
    gen = run("generate", path, "--prompt", prompt, "--max-tokens", "6", "--temperature", "0", "--ignore-eos", *SMALL)
    assert gen.returncode == 0, gen.stderr
    proc = subprocess.Popen([BINARY, "serve", path, "--port", "0", *SMALL],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert m, f"no listening line: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}"
        url = f"http://127.0.0.1:{m.group(1)}"
        for _ in range(200):
            try:
                if requests.get(url + "/health", timeout=5).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.05)
        name = requests.get(url + "/v1/models", timeout=5).json()["data"][0]["id"]
        r = requests.post(url + "/v1/completions",
                          json={"model": name, "prompt": prompt, "max_tokens": 6, "temperature": 0,
                                "ignore_eos": True}, timeout=30)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["usage"]["completion_tokens"] == 6, body
        text = body["choices"][0]["text"]
        assert text and text in gen.stdout, (text, gen.stdout)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
