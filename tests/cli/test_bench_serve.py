"""`nanoserve bench serve` against a mock OpenAI server with known timing and
injected faults (mock_openai_server.py), and against `nanoserve serve` on the
default model. Figures are read from --result-filename (vLLM's JSON keys)."""
import json
import os
import pty
import re
import socket
import subprocess
import sys

import pytest
import requests

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BINARY = os.path.join(ROOT, "build", "nanoserve")
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
from server_process import Server  # noqa: E402


class Mock:
    def __init__(self, *args):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "mock_openai_server.py"), *args],
                                     stdout=subprocess.PIPE, text=True)
        m = re.search(r"http://127\.0\.0\.1:(\d+)", self.proc.stdout.readline())
        assert m, "the mock server did not start"
        self.url = f"http://127.0.0.1:{m.group(1)}"

    def stats(self):
        return requests.get(self.url + "/stats", timeout=10).json()["requests"]

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()


@pytest.fixture
def mock(request):
    servers = []

    def start(*args):
        servers.append(Mock(*args))
        return servers[-1]
    yield start
    for s in servers:
        s.stop()


def bench(tmp_path, url, *args, timeout=120, env=None):
    """Runs bench serve; returns (process, result JSON or None)."""
    assert os.path.exists(BINARY), "build nanoserve first (scripts/build)"
    out = tmp_path / f"result-{len(list(tmp_path.iterdir()))}.json"
    r = subprocess.run([BINARY, "bench", "serve", "--base-url", url, "--result-filename", str(out), *args],
                       capture_output=True, text=True, timeout=timeout, env=env)
    return r, (json.loads(out.read_text()) if out.exists() else None)


def test_timing_matches_the_mock_and_counts_are_exact(mock, tmp_path):
    m = mock("--ttft-ms", "150", "--itl-ms", "40")
    r, res = bench(tmp_path, m.url, "--num-prompts", "8", "--random-input-len", "12", "--random-output-len", "6",
                   "--ignore-eos", "--metric-percentiles", "50,99")
    assert r.returncode == 0, r.stderr
    assert res["completed"] == 8 and res["failed"] == 0
    assert res["total_input_tokens"] == 96 and res["total_output_tokens"] == 48
    assert res["input_lens"] == [12] * 8 and res["usage_prompt_tokens"] == [12] * 8
    assert all(len(itl) == 5 for itl in res["itls"])  # 6 tokens, 5 gaps each
    # Known delays: the first token after 150 ms, then one every 40 ms. The
    # lower bounds are hard (the mock sleeps at least that long); the upper
    # ones leave room for a busy machine.
    assert 148 <= res["median_ttft_ms"] <= 400
    assert 36 <= res["median_itl_ms"] <= 120
    assert 36 <= res["median_tpot_ms"] <= 120
    assert 345 <= res["median_e2el_ms"] <= 900
    assert res["p50_ttft_ms"] == res["median_ttft_ms"] and res["p99_ttft_ms"] >= res["median_ttft_ms"]
    assert res["request_throughput"] == pytest.approx(8 / res["duration"])
    assert res["output_throughput"] == pytest.approx(48 / res["duration"])
    assert res["total_token_throughput"] == pytest.approx(144 / res["duration"])
    assert res["max_concurrent_requests"] == 8
    # What went over the wire: exact token-id prompts, streamed with usage.
    seen = m.stats()
    assert len(seen) == 8
    for s in seen:
        assert s["endpoint"] == "/v1/completions" and s["model"] == "mock-model"
        assert s["prompt_is_ids"] and s["prompt_len"] == 12 and s["max_tokens"] == 6
        assert s["stream"] and s["include_usage"] and s["ignore_eos"] and s["temperature"] == 0
    assert re.search(r"Successful requests:\s+8\b", r.stdout)
    assert re.search(r"P50 TTFT \(ms\):\s+[\d.]+", r.stdout) and "End-to-end Latency" in r.stdout
    # Not a terminal: plain progress lines, no carriage returns.
    assert "bench serve: 8/8 requests done, 0 failed" in r.stderr and "\r" not in r.stderr


def test_chat_text_prompts_and_the_empty_role_chunk_is_not_the_first_token(mock, tmp_path):
    m = mock("--ttft-ms", "150", "--itl-ms", "10")
    r, res = bench(tmp_path, m.url, "--endpoint", "/v1/chat/completions", "--num-prompts", "4",
                   "--random-input-len", "20", "--random-range-ratio", "0.5", "--random-output-len", "3")
    assert r.returncode == 0, r.stderr
    assert res["completed"] == 4 and res["total_output_tokens"] == sum(res["output_lens"])
    assert res["median_ttft_ms"] >= 148  # the role chunk comes at once, with empty content
    seen = m.stats()
    # The mock's /tokenize counts words: the text prompts have exactly the lengths asked.
    assert sorted(s["prompt_len"] for s in seen) == sorted(res["input_lens"])
    assert all(10 <= n <= 30 for n in res["input_lens"]) and len(set(res["input_lens"])) > 1
    assert not any(s["prompt_is_ids"] for s in seen)
    assert sorted(s["max_tokens"] for s in seen) == sorted(res["output_lens"])


def test_failures_are_counted_with_their_errors_and_never_hang(mock, tmp_path):
    # Of 12 requests by arrival: 4, 8, 12 get HTTP 500; 7 never answers; 5 and
    # 10 are cut mid-stream; 9 sends an error event. 5 succeed.
    m = mock("--ttft-ms", "20", "--itl-ms", "10", "--fail-every", "4", "--hang-every", "7",
             "--break-every", "5", "--error-every", "9")
    r, res = bench(tmp_path, m.url, "--num-prompts", "12", "--random-input-len", "4", "--random-output-len", "4",
                   "--request-timeout", "2", timeout=60)
    assert r.returncode == 0, r.stderr
    assert res["completed"] == 5 and res["failed"] == 7
    errors = [e for e in res["errors"] if e]
    assert sum("HTTP 500" in e and "injected failure" in e for e in errors) == 3
    assert sum("timed out after 2 s" in e for e in errors) == 1
    assert sum("before [DONE]" in e for e in errors) == 2
    assert sum("injected error event" in e for e in errors) == 1
    assert res["total_output_tokens"] == 20  # only the successful ones count
    assert re.search(r"Failed requests:\s+7\b", r.stdout)
    assert "First error: " in r.stdout
    assert 2.0 <= res["duration"] < 20


def test_a_stream_of_tokens_without_text_counts_its_tokens_untimed(mock, tmp_path):
    # Of 8 requests, 3 and 6 send their 5 tokens with no text (a dummy model's
    # ids past the tokenizer's vocabulary): they succeed, their tokens count
    # by the usage, and they have no TTFT or TPOT.
    m = mock("--ttft-ms", "20", "--itl-ms", "10", "--silent-every", "3")
    r, res = bench(tmp_path, m.url, "--num-prompts", "8", "--random-input-len", "4", "--random-output-len", "5",
                   "--max-concurrency", "1", "--ignore-eos")
    assert r.returncode == 0, r.stderr
    assert res["completed"] == 8 and res["failed"] == 0 and res["untimed"] == 2
    assert res["total_output_tokens"] == 40
    assert res["ttfts"].count(None) == 2 and all(t > 0 for t in res["ttfts"] if t is not None)
    assert re.search(r"Requests with no text \(untimed\):\s+2\b", r.stdout)
    # Without usage nothing counts them: failed, by name.
    m = mock("--ttft-ms", "20", "--itl-ms", "10", "--silent-every", "3", "--no-usage")
    r, res = bench(tmp_path, m.url, "--num-prompts", "4", "--random-input-len", "4", "--random-output-len", "5",
                   "--max-concurrency", "1", "--ignore-eos")
    assert r.returncode == 0, r.stderr
    assert res["completed"] == 3 and res["failed"] == 1
    assert "no text and no usage" in [e for e in res["errors"] if e][0]


def test_max_concurrency_and_request_rate(mock, tmp_path):
    m = mock("--ttft-ms", "200", "--itl-ms", "10")
    r, res = bench(tmp_path, m.url, "--num-prompts", "6", "--random-input-len", "4", "--random-output-len", "2",
                   "--max-concurrency", "2")
    assert r.returncode == 0, r.stderr
    assert res["max_concurrent_requests"] == 2 and res["max_concurrency"] == 2
    assert res["duration"] >= 3 * 0.21  # three waves of two
    assert re.search(r"Maximum request concurrency:\s+2\b", r.stdout)
    # Poisson arrivals at 20/s: 10 sends spread over about 0.45 s (9 gaps of mean 50 ms).
    r, res = bench(tmp_path, m.url, "--num-prompts", "10", "--random-input-len", "4", "--random-output-len", "2",
                   "--request-rate", "20", "--seed", "3")
    assert r.returncode == 0, r.stderr
    starts = res["start_times"]
    assert starts == sorted(starts) and starts[0] < 0.05 and 0.1 < starts[-1] < 2.0
    assert res["request_rate"] == 20
    # All at once: every request is in flight before the first answer. A shared
    # prefix of 3 tokens counts in each prompt's length.
    r, res = bench(tmp_path, m.url, "--num-prompts", "6", "--random-input-len", "4", "--random-output-len", "2",
                   "--random-prefix-len", "3")
    assert res["max_concurrent_requests"] == 6 and res["request_rate"] == "inf"
    assert res["input_lens"] == [7] * 6 and [s["prompt_len"] for s in m.stats()[-6:]] == [7] * 6


def test_a_terminal_gets_one_redrawn_progress_line(mock):
    m = mock("--ttft-ms", "20", "--itl-ms", "50")
    master, slave = pty.openpty()  # stderr a terminal, stdout a pipe
    r = subprocess.run([BINARY, "bench", "serve", "--base-url", m.url, "--num-prompts", "6", "--max-concurrency", "2",
                        "--random-input-len", "4", "--random-output-len", "3"],
                       stdout=subprocess.PIPE, stderr=slave, text=True, timeout=60)
    os.close(slave)
    err = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other end is closed and drained
            break
        if not chunk:
            break
        err += chunk
    os.close(master)
    assert r.returncode == 0
    err = err.decode()
    assert "\r6/6 [" + "=" * 30 + "] 100%" in err and "0 in flight, 0 failed" in err
    assert "requests done" not in err  # no plain lines on a terminal
    # Each frame counts the requests in flight after a finished one was replaced.
    frames = [(int(d), int(f)) for d, f in re.findall(r"\r(\d)/6 \[.*?(\d+) in flight", err)]
    assert frames and all(f == 2 for d, f in frames if d <= 4), frames


def test_bad_flags_and_an_unreachable_server(tmp_path):
    r, _ = bench(tmp_path, "http://127.0.0.1:1", "--endpoint", "/v1/embeddings")
    assert r.returncode == 2 and "--endpoint" in r.stderr
    r, _ = bench(tmp_path, "http://127.0.0.1:1", "--request-rate", "fast")
    assert r.returncode == 2 and "--request-rate" in r.stderr
    r, _ = bench(tmp_path, "https://127.0.0.1:1")
    assert r.returncode == 2 and "https" in r.stderr
    r, _ = bench(tmp_path, "http://127.0.0.1:1", "--percentile-metrics", "ttft,foo")
    assert r.returncode == 2 and "'foo'" in r.stderr
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r, res = bench(tmp_path, f"http://127.0.0.1:{port}", timeout=30)
    assert r.returncode == 1 and "/v1/models" in r.stderr and "connect" in r.stderr and res is None


@pytest.fixture(scope="module")
def nanoserve():
    s = Server()
    yield s
    s.stop()


def test_against_nanoserve_serve(nanoserve, tmp_path):
    r, res = bench(tmp_path, nanoserve.url, "--api-key", nanoserve.api_key, "--num-prompts", "4",
                   "--random-input-len", "16", "--random-output-len", "8", "--ignore-eos")
    assert r.returncode == 0, r.stderr + r.stdout
    assert res["completed"] == 4 and res["failed"] == 0 and res["model_id"] == nanoserve.model
    assert res["total_input_tokens"] == 64 and res["total_output_tokens"] == 32
    assert res["usage_prompt_tokens"] == [16] * 4  # token-id prompts: exact
    assert all(1 <= len(itl) <= 7 for itl in res["itls"])
    for m in ("ttft", "tpot", "itl", "e2el"):
        assert res[f"median_{m}_ms"] > 0
    assert res["median_e2el_ms"] > res["median_ttft_ms"]
    assert res["total_token_throughput"] > res["output_throughput"] > 0


def test_against_nanoserve_serve_chat_text_prompts_are_exact(nanoserve, tmp_path):
    env = dict(os.environ, OPENAI_API_KEY=nanoserve.api_key)  # the key from the environment
    r, res = bench(tmp_path, nanoserve.url, "--endpoint", "/v1/chat/completions", "--num-prompts", "3",
                   "--random-input-len", "12", "--random-range-ratio", "0.5", "--random-output-len", "4",
                   "--ignore-eos", env=env)
    assert r.returncode == 0, r.stderr + r.stdout
    assert res["completed"] == 3 and res["total_output_tokens"] == sum(res["output_lens"])
    assert "still off" in res["input_lengths"] and "0 still off" in res["input_lengths"]
    # The chat template adds the same tokens to every prompt: the content is exact.
    overhead = {u - n for u, n in zip(res["usage_prompt_tokens"], res["input_lens"])}
    assert len(overhead) == 1 and overhead.pop() > 0
    # Text prompts on /v1/completions: the server's count is the count asked for.
    r, res = bench(tmp_path, nanoserve.url, "--prompt-kind", "text", "--num-prompts", "3",
                   "--random-input-len", "12", "--random-range-ratio", "0.5", "--random-output-len", "2", env=env)
    assert r.returncode == 0, r.stderr + r.stdout
    assert res["usage_prompt_tokens"] == res["input_lens"]


def test_a_wrong_key_fails_every_request_with_the_status(nanoserve, tmp_path):
    r, res = bench(tmp_path, nanoserve.url, "--api-key", "wrong", "--model", nanoserve.model,
                   "--prompt-kind", "text", "--num-prompts", "2", "--random-input-len", "4",
                   "--random-output-len", "2")
    assert r.returncode == 1 and res["completed"] == 0 and res["failed"] == 2
    assert "HTTP 401" in res["errors"][0] and "First error: HTTP 401" in r.stdout


def test_offline_bench_is_unchanged():
    r = subprocess.run([BINARY, "bench", "--num-prompts", "2", "--input-len", "8", "--output-len", "4"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^(batched|cache)\s+wall [\d.]+ s \| output [\d.]+ tok/s", r.stdout, re.M)


def test_offline_bench_takes_vllm_random_dataset_names():
    def lengths(*args):
        r = subprocess.run([BINARY, "bench", "--num-prompts", "3", *args], capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr
        return re.search(r"^3 requests: (\d+) prompt tokens, (\d+) output tokens", r.stdout, re.M).groups()

    ours = lengths("--input-len", "12", "--output-len", "3", "--range-ratio", "0.5")
    vllm = lengths("--dataset-name", "random", "--random-input-len", "12", "--random-output-len", "3",
                   "--random-range-ratio", "0.5", "--ignore-eos")
    assert ours == vllm and ours != ("36", "9")  # the same draws, and the ratio spread them
    r = subprocess.run([BINARY, "bench", "--dataset-name", "sharegpt"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--dataset-name" in r.stderr


def test_a_server_still_loading_is_waited_for_not_blamed_on_the_prompts(mock, tmp_path):
    """Issue 36 item 8: a 503 "still loading" means wait (with a bound), not "use --prompt-kind text"."""
    m = mock("--ttft-ms", "5", "--itl-ms", "1", "--loading-s", "1.5")
    r, res = bench(tmp_path, m.url, "--num-prompts", "2", "--random-input-len", "4", "--random-output-len", "2")
    assert r.returncode == 0, r.stderr
    assert "not ready" in r.stderr and "--prompt-kind" not in r.stderr
    assert res["completed"] == 2 and all(s["prompt_is_ids"] for s in m.stats())
    # The bound: a server that stays loading fails the run once it is spent, and says why.
    m2 = mock("--loading-s", "3600")
    r, res = bench(tmp_path, m2.url, "--num-prompts", "2", "--ready-check-timeout-sec", "1", timeout=30)
    assert r.returncode != 0 and res is None
    assert "not ready after 1 s" in r.stderr and "503" in r.stderr and "--prompt-kind" not in r.stderr
