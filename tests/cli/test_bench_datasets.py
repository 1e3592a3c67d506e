"""`bench` and `bench serve` read vLLM's dataset files: --dataset-name
sharegpt (a ShareGPT JSON list) and custom (JSON Lines of prompts), from the
committed fixtures (tests/fixtures/bench, made by make_bench_datasets.py).
The expected token totals come from the Hugging Face tokenizer of the model
(the `tokenizers` package), with vLLM's ShareGPT filter applied here."""
import json
import os
import re

import pytest
from tokenizers import Tokenizer

from cli_process import QWEN2_HF, ROOT, SMALL, Serve, run

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "bench")
SHAREGPT = os.path.join(FIXTURES, "sharegpt_small.json")
PROMPTS = os.path.join(FIXTURES, "prompts.jsonl")
HF_TOKENIZER = Tokenizer.from_file(os.path.join(QWEN2_HF, "tokenizer.json"))


def count(text):
    return len(HF_TOKENIZER.encode(text, add_special_tokens=True).ids)


def sharegpt_pairs():
    """The (prompt tokens, reply tokens) vLLM's reader keeps."""
    kept = []
    for entry in json.load(open(SHAREGPT)):
        turns = entry["conversations"]
        if len(turns) < 2:
            continue
        p, o = count(turns[0]["value"]), count(turns[1]["value"])
        if p < 4 or o < 4 or p > 1024 or p + o > 2048:
            continue
        kept.append((p, o))
    return kept


def totals(stdout):
    m = re.search(r"(\d+) requests: (\d+) prompt tokens, (\d+) output tokens", stdout)
    assert m, stdout
    return tuple(int(x) for x in m.groups())


def test_fixtures_are_what_the_script_makes(tmp_path):
    import shutil
    import subprocess
    import sys
    copy = tmp_path / "make_bench_datasets.py"
    shutil.copy(os.path.join(FIXTURES, "make_bench_datasets.py"), copy)
    subprocess.run([sys.executable, str(copy)], check=True)
    for name in ("sharegpt_small.json", "prompts.jsonl"):
        assert (tmp_path / name).read_bytes() == open(os.path.join(FIXTURES, name), "rb").read(), name


def test_sharegpt_offline_bench_takes_vllms_pairs():
    kept = sharegpt_pairs()
    assert 0 < len(kept) < len(json.load(open(SHAREGPT)))  # the fixture has entries the filter drops
    r = run("bench", QWEN2_HF, "--dataset-name", "sharegpt", "--dataset-path", SHAREGPT, "--num-prompts",
            str(len(kept)), "--max-model-len", "256", *SMALL)
    assert r.returncode == 0, r.stderr
    # Every kept pair is taken (whatever the shuffle), each asking for its reply's token count.
    assert totals(r.stdout) == (len(kept), sum(p for p, _ in kept), sum(o for _, o in kept))
    # --sharegpt-output-len fixes the output length instead.
    r = run("bench", QWEN2_HF, "--dataset-name", "sharegpt", "--dataset-path", SHAREGPT, "--num-prompts", "3",
            "--sharegpt-output-len", "5", "--max-model-len", "256", *SMALL)
    assert r.returncode == 0, r.stderr
    assert totals(r.stdout)[2] == 15


def test_sharegpt_with_too_few_usable_pairs_is_an_error():
    n = len(sharegpt_pairs()) + 1
    r = run("bench", QWEN2_HF, "--dataset-name", "sharegpt", "--dataset-path", SHAREGPT, "--num-prompts", str(n),
            *SMALL)
    assert r.returncode == 2 and f"{n - 1} usable prompts for --num-prompts {n}" in r.stderr, r.stderr


def test_custom_jsonl_offline_bench():
    lines = [json.loads(x)["prompt"] for x in open(PROMPTS)]
    r = run("bench", QWEN2_HF, "--dataset-name", "custom", "--dataset-path", PROMPTS, "--num-prompts", "5",
            "--custom-output-len", "3", *SMALL)
    assert r.returncode == 0, r.stderr
    assert totals(r.stdout) == (5, sum(count(p) for p in lines[:5]), 15)


@pytest.mark.parametrize("content,message", [('{"prompt": "ok"}\n{"text": "no prompt"}\n', "line 2: no string 'prompt'"),
                                             ('{"prompt": "ok"}\nnot json\n', "line 2: not valid JSON")])
def test_malformed_jsonl_names_the_line(tmp_path, content, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    r = run("bench", QWEN2_HF, "--dataset-name", "custom", "--dataset-path", str(bad), "--num-prompts", "2", *SMALL)
    assert r.returncode == 2 and f"{bad}: {message}" in r.stderr, r.stderr


def test_dataset_flags_are_checked():
    r = run("bench", QWEN2_HF, "--dataset-name", "sharegpt", "--num-prompts", "1", *SMALL)
    assert r.returncode == 2 and "--dataset-name sharegpt needs --dataset-path" in r.stderr, r.stderr
    r = run("bench", QWEN2_HF, "--dataset-path", PROMPTS, *SMALL)
    assert r.returncode == 2 and "--dataset-path needs --dataset-name" in r.stderr, r.stderr


@pytest.mark.parametrize("name,path", [("custom", PROMPTS), ("sharegpt", SHAREGPT)])
def test_bench_serve_reads_the_datasets(name, path):
    with Serve(QWEN2_HF, "--port", "0", "--max-model-len", "256", *SMALL) as s:
        assert s.started(), s.stderr
        n = 4
        r = run("bench", "serve", "--base-url", s.url, "--dataset-name", name, "--dataset-path", path,
                "--num-prompts", str(n), "--custom-output-len", "3", "--sharegpt-output-len", "4", "--seed", "1",
                timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        m = re.search(r"Successful requests:\s+(\d+)", r.stdout)
        assert m and int(m.group(1)) == n, r.stdout
        m = re.search(r"Total input tokens:\s+(\d+)", r.stdout)
        if name == "custom":
            expected = sum(count(json.loads(x)["prompt"]) for x in open(PROMPTS).readlines()[:n])
            assert m and int(m.group(1)) == expected, r.stdout
        m = re.search(r"Total generated tokens:\s+(\d+)", r.stdout)
        assert m and int(m.group(1)) == n * (3 if name == "custom" else 4), r.stdout
