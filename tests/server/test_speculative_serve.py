"""`serve --speculative-config`: the same completions, vLLM's spec_decode counters in /metrics, and
`bench serve` reporting the acceptance rate from them."""
import os
import re
import subprocess

from server_process import API_KEY, BINARY, Server

NGRAM = ('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1, '
         '"adaptive": false}')  # always propose: these tests are about verification, not sizing
PROMPT = "Repeat exactly: the quick brown fox jumps over the lazy dog. the quick brown fox jumps over the lazy dog."


def complete(srv, **extra):
    body = {"model": srv.model, "prompt": PROMPT, "max_tokens": 16, "temperature": 0, **extra}
    r = srv.post("/v1/completions", body)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def test_spec_decode_metrics_and_bench_serve():
    plain = Server()
    try:
        want = [complete(plain), complete(plain, temperature=0.9, seed=5)]
        assert not any("spec_decode" in k for k in plain.metrics())  # registered only when on
    finally:
        plain.stop()
    srv = Server("--speculative-config", NGRAM)
    try:
        assert [complete(srv), complete(srv, temperature=0.9, seed=5)] == want
        drafts = srv.metric("nanoserve:spec_decode_num_drafts_total")
        proposed = srv.metric("nanoserve:spec_decode_num_draft_tokens_total")
        accepted = srv.metric("nanoserve:spec_decode_num_accepted_tokens_total")
        assert drafts > 0 and proposed >= drafts and 0 < accepted <= proposed
        per_pos = [srv.metric("nanoserve:spec_decode_num_accepted_tokens_per_pos_total", position=str(j))
                   for j in range(4)]
        assert sum(per_pos) == accepted and per_pos == sorted(per_pos, reverse=True)
        r = subprocess.run([BINARY, "bench", "serve", "--base-url", srv.url, "--api-key", API_KEY,
                            "--num-prompts", "2", "--random-input-len", "16", "--random-output-len", "8",
                            "--ignore-eos", "--no-progress"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert re.search(r"Acceptance rate \(%\):\s+[\d.]+", r.stdout), r.stdout
        m = re.search(r"Draft tokens:\s+(\d+)", r.stdout)
        assert m, r.stdout
        assert int(m.group(1)) == srv.metric("nanoserve:spec_decode_num_draft_tokens_total") - proposed
    finally:
        srv.stop()
