"""`nanoserve tokenize` end to end, and the parity fixture against a fresh run
of the Hugging Face oracle (so a stale fixture cannot hide a change)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.path.join(ROOT, "build", "nanoserve")
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "tokenizer")
sys.path.insert(0, FIXTURES)

import make_parity_fixture  # noqa: E402


@pytest.fixture(scope="module")
def oracle():
    backend = make_parity_fixture.load_hf(MODEL).backend_tokenizer
    backend.pre_tokenizer = make_parity_fixture.smollm_pre_tokenizer()
    return backend


@pytest.fixture(scope="module")
def parity():
    with open(os.path.join(FIXTURES, "parity.json"), encoding="utf-8") as f:
        return json.load(f)


def tokenize(*args):
    assert os.path.exists(BINARY), "build nanoserve first (scripts/build)"
    return subprocess.run([BINARY, "tokenize", *args], capture_output=True, timeout=60)


def cli_cases(parity):
    # argv cannot carry NUL bytes or invalid UTF-8 through Python; a leading '-' would read as a flag.
    cases = [e for e in parity if "text" in e and "\x00" not in e["text"] and not e["text"].startswith("-")]
    return cases[::20]


def ids_of(stdout):
    return [int(x) for x in stdout.decode().split()]


def test_ids_only_matches_hugging_face(parity):
    cases = cli_cases(parity)
    assert len(cases) >= 15
    for e in cases:
        r = tokenize("--ids-only", MODEL, e["text"])
        assert r.returncode == 0, r.stderr
        assert ids_of(r.stdout) == e["ids"], e["text"]
        r = tokenize("--ids-only", "--no-special", "-m", MODEL, e["text"])
        assert r.returncode == 0, r.stderr
        assert ids_of(r.stdout) == e["ids_plain"], e["text"]


def test_pieces_listing(oracle):
    text = "<|im_start|>user\nHi 42"
    r = tokenize(MODEL, text)
    assert r.returncode == 0, r.stderr
    enc = oracle.encode(text, add_special_tokens=False)
    pieces = ["<|im_start|>", "user", "\\n", "Hi", " ", "4", "2"]
    expected = [f"{i:6d} -> '{p}'" for i, p in zip(enc.ids, pieces)] + [f"{len(enc.ids)} tokens"]
    assert r.stdout.decode().splitlines() == expected


def test_bad_model_is_a_clear_error():
    r = tokenize("--ids-only", "/nonexistent/model.gguf", "hello")
    assert r.returncode == 1
    assert b"/nonexistent/model.gguf" in r.stderr
    r = tokenize("-m", MODEL, MODEL, "hello")
    assert r.returncode == 2


def test_fixture_matches_a_fresh_oracle_run(oracle, parity):
    for e in parity:
        text = make_parity_fixture.text_of(e)
        assert oracle.encode(text, add_special_tokens=False).ids == e["ids"], text
