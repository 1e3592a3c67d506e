"""`nanoserve generate` end to end on the default model."""
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.path.join(ROOT, "build", "nanoserve")
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def generate(*args):
    assert os.path.exists(BINARY), "build nanoserve first (scripts/build)"
    return subprocess.run([BINARY, "generate", *args], capture_output=True, text=True, timeout=300)


def test_capital_of_france_mentions_paris():
    r = generate("-m", MODEL, "-p", "The capital of France is", "-n", "12", "--temperature", "0", "--threads", "2")
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout
    stats = re.search(r"load [\d.]+ s \| prompt (\d+) tokens, prefill [\d.]+ tok/s \| generated (\d+) tokens "
                      r"\((\w+)\), decode [\d.]+ tok/s", r.stderr)
    assert stats, r.stderr
    assert int(stats.group(1)) == 5 and int(stats.group(2)) == 12 and stats.group(3) == "length"


def test_chat_stops_at_end_of_turn_and_uses_default_model():
    r = generate("--chat", "What is the capital of France? Answer in one sentence.", "-n", "64", "--temperature", "0")
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout
    assert "<|im_end|>" not in r.stdout
    assert "(stop)" in r.stderr


def test_stop_string_is_not_printed():
    r = generate("-m", MODEL, "-p", "The capital of France is", "-n", "12", "--temperature", "0", "--stop", "Paris")
    assert r.returncode == 0, r.stderr
    assert "Paris" not in r.stdout
    assert "(stop)" in r.stderr


def test_bad_flags_fail_cleanly():
    assert generate("-m", MODEL).returncode == 2  # neither -p nor --chat
    r = generate("-m", "/nonexistent.gguf", "-p", "x")
    assert r.returncode == 1 and "nonexistent" in r.stderr
    r = generate("-m", MODEL, "-p", "x", "--top-p", "7")
    assert r.returncode == 1 and "top_p" in r.stderr
