"""nanoserve run-batch: an OpenAI batch file with good and bad lines, resumed, in bounded memory."""
import json
import os
import subprocess
import sys

import requests

from cli_process import BINARY, ROOT, run

sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
from server_process import Server  # noqa: E402

MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
ENGINE = ["--max-model-len", "256", "--kv-cache-memory", "32M", "--threads", "2"]
CHAT = {"messages": [{"role": "user", "content": "Name three colors."}], "max_tokens": 16, "temperature": 0}
COMPLETION = {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}


def line(custom_id, url, body, method="POST"):
    return json.dumps({"custom_id": custom_id, "method": method, "url": url, "body": body})


LINES = [
    line("chat-1", "/v1/chat/completions", CHAT),
    line("cmpl-1", "/v1/completions", COMPLETION),
    "{not json",
    json.dumps({"method": "POST", "url": "/v1/completions", "body": COMPLETION}),  # no custom_id
    line("bad-url", "/v1/embeddings", {"input": "x"}),
    line("bad-method", "/v1/completions", COMPLETION, method="GET"),
    line("bad-temp", "/v1/completions", {**COMPLETION, "temperature": -1}),
    line("streamed", "/v1/chat/completions", {**CHAT, "stream": True}),
    "",  # blank lines are no requests
    line("chat-2", "/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": "Say hi."}]}),
]


def run_batch(inp, out, *extra):
    return run("run-batch", MODEL, "-i", str(inp), "-o", str(out), *ENGINE, *extra, timeout=120)


def records(path):
    with open(path) as f:
        return [json.loads(x) for x in f]


def test_good_and_bad_lines(tmp_path):
    inp, out = tmp_path / "requests.jsonl", tmp_path / "results.jsonl"
    inp.write_text("\n".join(LINES) + "\n")
    r = run_batch(inp, out)
    assert r.returncode == 0, r.stderr
    assert "9 written (6 with an error)" in r.stderr
    recs = records(out)
    assert [x["custom_id"] for x in recs] == ["chat-1", "cmpl-1", None, None, "bad-url", "bad-method", "bad-temp",
                                             "streamed", "chat-2"]
    assert len({x["id"] for x in recs}) == 9 and all(x["id"].startswith("batch_req_") for x in recs)
    by_id = {x["custom_id"]: x for x in recs if x["custom_id"]}
    for cid in ("chat-1", "cmpl-1", "chat-2"):
        assert by_id[cid]["error"] is None and by_id[cid]["response"]["status_code"] == 200
        assert by_id[cid]["response"]["request_id"] == by_id[cid]["response"]["body"]["id"]
    assert by_id["chat-1"]["response"]["body"]["object"] == "chat.completion"
    assert by_id["cmpl-1"]["response"]["body"]["object"] == "text_completion"
    assert recs[2]["response"] is None and recs[2]["error"]["code"] == "invalid_json"
    assert "line 3" in recs[2]["error"]["message"]
    assert "custom_id" in recs[3]["error"]["message"]
    assert "url" in by_id["bad-url"]["error"]["message"]
    assert "method" in by_id["bad-method"]["error"]["message"]
    assert "stream" in by_id["streamed"]["error"]["message"]
    bad = by_id["bad-temp"]["response"]
    assert bad["status_code"] == 400 and bad["body"]["error"]["param"] == "temperature"
    assert by_id["bad-temp"]["error"] is None


def test_bodies_equal_the_servers(tmp_path):
    """run-batch builds the same responses as `nanoserve serve` does for the same bodies."""
    inp, out = tmp_path / "requests.jsonl", tmp_path / "results.jsonl"
    inp.write_text(LINES[0] + "\n" + LINES[1] + "\n")
    assert run_batch(inp, out).returncode == 0
    recs = records(out)
    server = Server("--max-model-len", "256")
    try:
        chat = server.post("/v1/chat/completions", CHAT).json()
        cmpl = server.post("/v1/completions", COMPLETION).json()
    finally:
        server.stop()
    assert recs[0]["response"]["body"]["choices"] == chat["choices"]
    assert recs[0]["response"]["body"]["usage"] == chat["usage"]
    assert recs[1]["response"]["body"]["choices"] == cmpl["choices"]


def test_resume_skips_what_is_there(tmp_path):
    inp, out = tmp_path / "requests.jsonl", tmp_path / "results.jsonl"
    inp.write_text("\n".join(LINES) + "\n")
    assert run_batch(inp, out).returncode == 0
    full = out.read_text().splitlines(keepends=True)
    # A stop after two records, in the middle of the third.
    out.write_text(full[0] + full[1] + full[2][: len(full[2]) // 2])
    r = run_batch(inp, out)
    assert r.returncode == 0, r.stderr
    assert "7 written" in r.stderr and "2 already in" in r.stderr
    resumed = out.read_text().splitlines(keepends=True)
    assert resumed[:2] == full[:2]  # kept byte for byte, not run again
    assert [json.loads(x)["custom_id"] for x in resumed] == [json.loads(x)["custom_id"] for x in full]
    # Finished: a third run writes nothing.
    r = run_batch(inp, out)
    assert r.returncode == 0 and "0 written" in r.stderr and "9 already in" in r.stderr
    assert out.read_text().splitlines(keepends=True) == resumed
    # The results of another input are refused, not appended to.
    other = tmp_path / "other.jsonl"
    other.write_text(LINES[1] + "\n")
    r = run_batch(other, out)
    assert r.returncode == 2 and "another input" in r.stderr


def peak_rss_kb(args):
    """The peak resident memory of one run, measured in a fresh process of its own, and its stderr."""
    code = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
            "assert r.returncode == 0, r.stderr; sys.stderr.write(r.stderr); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return int(r.stdout), r.stderr


def test_memory_is_bounded(tmp_path):
    """At most --max-in-flight lines are held at once, and a line is not kept once read: 160 lines
    of 250 kB each (40 MB) run in the memory of 160 small lines."""
    small = {"prompt": "Hi", "max_tokens": 1, "temperature": 0}
    big = {**small, "user": "x" * 250_000}  # accepted and ignored by the API
    for name, body in (("small", small), ("big", big)):
        with open(tmp_path / f"{name}.jsonl", "w") as f:
            for i in range(160):
                f.write(line(f"r{i}", "/v1/completions", body) + "\n")
    base = [BINARY, "run-batch", MODEL, *ENGINE, "--max-in-flight", "8"]
    rss_small, _ = peak_rss_kb(base + ["-i", str(tmp_path / "small.jsonl"), "-o", str(tmp_path / "small.out")])
    rss_big, log = peak_rss_kb(base + ["-i", str(tmp_path / "big.jsonl"), "-o", str(tmp_path / "big.out")])
    assert len(records(tmp_path / "big.out")) == 160
    assert "at most 8 lines held at once" in log, log
    assert rss_big - rss_small < 16_000, (rss_small, rss_big)  # kB; holding the file would be 40,000+


def test_usage_errors(tmp_path):
    r = run("run-batch", MODEL, "-i", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "o.jsonl"))
    assert r.returncode == 2 and "missing.jsonl" in r.stderr
    inp = tmp_path / "in.jsonl"
    inp.write_text(LINES[1] + "\n")
    r = run("run-batch", MODEL, "-i", str(inp), "-o", str(inp))
    assert r.returncode == 2 and "-o" in r.stderr
    r = run("run-batch", MODEL, "-i", str(inp))
    assert r.returncode != 0 and "--output-file" in r.stderr
