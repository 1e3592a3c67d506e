"""vLLM's serve flags, one by one: each is honoured where it has a meaning
here (and the effect is checked), or refused naming the flag and the reason;
none is taken and silently dropped."""
import json
import os
import re
import shutil

import pytest
import requests

from cli_process import QWEN2_GGUF, QWEN2_HF, SMALL, Serve, run


def refused(*args, env=None):
    r = run("serve", QWEN2_GGUF, "--port", "0", *args, *SMALL, env=env)
    assert r.returncode not in (0, 134) and r.returncode > 0, (r.returncode, r.stdout, r.stderr)
    assert "listening" not in r.stdout
    return r.stderr


def kv_tokens(stderr):
    m = re.search(r"KV cache: \d+ blocks x \d+ tokens = (\d+) tokens", stderr)
    assert m, stderr
    return int(m.group(1))


def sample(*args):
    """The token log-probabilities of one unseeded temperature-2 completion
    from a fresh server (the fixture's text is mostly stray bytes, so the
    tokens are compared through their log-probabilities)."""
    with Serve(QWEN2_GGUF, "--port", "0", *args, *SMALL) as s:
        assert s.started(), s.stderr
        r = requests.post(s.url + "/v1/completions", json={"prompt": "a b c", "max_tokens": 32, "temperature": 2.0,
                                                           "ignore_eos": True, "logprobs": 0}, timeout=30)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["logprobs"]["token_logprobs"]


def test_seed_is_the_engine_seed_of_unseeded_requests():
    assert sample("--seed", "7") == sample("--seed", "7")
    assert sample("--seed", "7") != sample("--seed", "8")


def test_dtype_on_the_cpu_sets_the_kv_cache_dtype():
    tokens = {}
    for dtype in ("float32", "bfloat16", "half"):
        with Serve(QWEN2_GGUF, "--port", "0", "--dtype", dtype, *SMALL) as s:
            assert s.started(), s.stderr
            _, err = s.stop()
            tokens[dtype] = kv_tokens(err)
            if dtype != "float32":
                assert err.count(f"--dtype {dtype}: the CPU computes in float32") == 1, err
    # The same bytes hold twice the tokens at two bytes an element.
    assert tokens["bfloat16"] == tokens["half"] == 2 * tokens["float32"], tokens
    assert "--dtype" in refused("--dtype", "int8")


def test_kv_cache_dtype_fp8_holds_four_times_the_f32_tokens_and_serves():
    tokens = {}
    for dtype in ("f32", "fp8", "fp8_e4m3"):
        with Serve(QWEN2_GGUF, "--port", "0", "--kv-cache-dtype", dtype, *SMALL) as s:
            assert s.started(), s.stderr
            r = requests.post(s.url + "/v1/completions", json={"prompt": "a b c", "max_tokens": 8,
                                                               "temperature": 0, "ignore_eos": True}, timeout=30)
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 8, r.text
            _, err = s.stop()
            tokens[dtype] = kv_tokens(err)
    # One byte an element against four, in the same --kv-cache-memory.
    assert tokens["fp8"] == tokens["fp8_e4m3"] == 4 * tokens["f32"], tokens
    # E5M2 (vLLM's other fp8) is refused by name, not taken as E4M3.
    err = refused("--kv-cache-dtype", "fp8_e5m2")
    assert "fp8_e5m2" in err and "not implemented" in err, err


def test_uvicorn_log_level_is_the_log_level():
    for level, shown in (("warning", False), ("info", True)):
        with Serve(QWEN2_GGUF, "--port", "0", "--uvicorn-log-level", level, *SMALL) as s:
            assert s.started(), s.stderr
            _, err = s.stop()
            assert ("[I] KV cache" in err) == shown, err


def test_trust_remote_code_is_taken_and_said_once():
    with Serve(QWEN2_GGUF, "--port", "0", "--trust-remote-code", *SMALL) as s:
        assert s.started(), s.stderr
        _, err = s.stop()
        assert err.count("--trust-remote-code: no effect") == 1, err


@pytest.mark.parametrize("args", [["-tp", "1"], ["--tensor-parallel-size", "1"], ["-tp=1", "-pp", "1"]])
def test_one_device_parallel_sizes_start(args):
    with Serve(QWEN2_GGUF, "--port", "0", *args, *SMALL) as s:
        assert s.started(), s.stderr


@pytest.mark.parametrize("args,flag", [(["-tp", "2"], "--tensor-parallel-size 2"),
                                       (["-tp=8"], "--tensor-parallel-size 8"),
                                       (["--pipeline-parallel-size", "2"], "--pipeline-parallel-size 2"),
                                       (["-dp", "4"], "--data-parallel-size 4")])
def test_parallel_sizes_above_one_are_refused_by_name(args, flag):
    err = refused(*args)
    assert flag in err and "one device" in err, err


@pytest.mark.parametrize("args,flag", [(["--gpu-memory-utilization", "0.9"], "--gpu-memory-utilization"),
                                       (["--cublas-prefill"], "--cublas-prefill")])
def test_gpu_only_flags_on_a_cpu_run_are_refused(args, flag):
    err = refused("--device", "cpu", *args)
    assert f"{flag}: this run is on the CPU" in err, err


def test_enforce_eager_on_a_cpu_run_is_honoured_and_said():
    with Serve(QWEN2_GGUF, "--port", "0", "--device", "cpu", "--enforce-eager", *SMALL) as s:
        assert s.started(), s.stderr
        _, err = s.stop()
        assert err.count("--enforce-eager: the CPU runner always runs each step eagerly") == 1, err


def completions(url, n, **fields):
    """The token logprobs of n unseeded completions of one prompt."""
    out = []
    for _ in range(n):
        r = requests.post(url + "/v1/completions", json={"prompt": "a b c", "ignore_eos": True, "logprobs": 0,
                                                          **fields}, timeout=30)
        assert r.status_code == 200, r.text
        out.append(r.json()["choices"][0]["logprobs"]["token_logprobs"])
    return out


def test_generation_config_auto_applies_the_models_defaults_to_requests_that_omit_them(tmp_path):
    # vLLM's default is auto: the model folder's generation_config.json.
    model = tmp_path / "model"
    shutil.copytree(QWEN2_HF, model)
    (model / "generation_config.json").write_text(json.dumps({"temperature": 0.0, "max_new_tokens": 5,
                                                              "eos_token_id": 0}))
    with Serve(str(model), "--port", "0", *SMALL) as s:
        assert s.started(), s.stderr
        greedy = completions(s.url, 1, temperature=0.0, max_tokens=5)[0]
        # Without temperature: the file's 0 (greedy, the same every time); without max_tokens: its 5.
        assert completions(s.url, 2) == [greedy, greedy]
        # A request's own field wins; max_new_tokens caps a larger max_tokens, as vLLM does.
        hot = completions(s.url, 3, temperature=2.0, max_tokens=20)
        assert all(len(h) == 5 for h in hot) and any(h != greedy for h in hot), hot
        _, err = s.stop()
        assert err.count("--generation-config auto: requests that omit them get") == 1, err
        assert "temperature=0 max_tokens=5" in err, err
    # vllm: the file is not read; an unseeded request samples at temperature 1 for 32 tokens.
    with Serve(str(model), "--port", "0", "--generation-config", "vllm", *SMALL) as s:
        assert s.started(), s.stderr
        a, b = completions(s.url, 2, max_tokens=32)
        assert len(a) == len(b) == 32 and a != b


def test_generation_config_folder(tmp_path):
    folder = tmp_path / "gen"
    folder.mkdir()
    # top_k 1 makes temperature-1 sampling greedy; top_p 1.0 is Hugging Face's default, so no default.
    (folder / "generation_config.json").write_text(json.dumps({"top_k": 1, "top_p": 1.0}))
    with Serve(QWEN2_GGUF, "--port", "0", "--generation-config", str(folder), *SMALL) as s:
        assert s.started(), s.stderr
        greedy = completions(s.url, 1, temperature=0.0, max_tokens=8)[0]
        assert completions(s.url, 2, max_tokens=8) == [greedy, greedy]
        assert any(c != greedy for c in completions(s.url, 3, max_tokens=8, top_k=-1))
        _, err = s.stop()
        assert "sampling defaults: top_k=1 (" in err, err
    # Bad values and a folder that is none: refused at start-up, naming the flag and the key.
    (folder / "generation_config.json").write_text(json.dumps({"temperature": -1}))
    err = refused("--generation-config", str(folder))
    assert "--generation-config" in err and "'temperature' is -1" in err, err
    (folder / "generation_config.json").write_text(json.dumps({"max_new_tokens": "many"}))
    assert "'max_new_tokens' must be a number" in refused("--generation-config", str(folder))
    assert "not a folder" in refused("--generation-config", str(tmp_path / "absent"))
    # Only end-of-generation ids: nothing to apply, nothing said.
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [0]}))
    with Serve(QWEN2_GGUF, "--port", "0", "--generation-config", str(folder), *SMALL) as s:
        assert s.started(), s.stderr
        _, err = s.stop()
        assert "sampling defaults" not in err, err


def test_flags_taken_for_pasted_lines_start():
    with Serve(QWEN2_GGUF, "--port", "0", "--disable-log-requests", "--disable-log-stats", "--enable-chunked-prefill",
               "--swap-space", "4", "--distributed-executor-backend", "mp", "--no-trust-remote-code",
               "--dtype", "auto", *SMALL) as s:
        assert s.started(), s.stderr
        _, err = s.stop()
        assert "--distributed-executor-backend mp: no effect" in err, err
        # --swap-space is honoured: the start-up line gives the area (4 GiB of the pool's blocks).
        assert re.search(r"swap space \d+ blocks \(4096\.0 MiB\)", err), err


@pytest.mark.parametrize("args,flag", [(["--quantization", "awq"], "--quantization awq"),
                                       (["--quantization", "fp8", "--device", "cpu"], "--quantization fp8"),
                                       (["--enable-lora"], "--enable-lora"),
                                       (["--lora-modules", "sql=/x"], "--lora-modules"),
                                       (["--revision", "main"], "--revision main")])
def test_unsupported_features_are_refused_by_name(args, flag):
    err = refused(*args)
    assert flag + ":" in err, err


def test_tokenizer_of_another_folder_replaces_the_models():
    gguf = run("generate", QWEN2_GGUF, "-p", "The quick brown", "-n", "6", "--temperature", "0", *SMALL)
    hf_tok = run("generate", QWEN2_GGUF, "--tokenizer", QWEN2_HF, "-p", "The quick brown", "-n", "6",
                 "--temperature", "0", *SMALL)
    assert gguf.returncode == 0 and hf_tok.returncode == 0, (gguf.stderr, hf_tok.stderr)
    assert gguf.stdout == hf_tok.stdout and gguf.stdout.strip()
    missing = run("generate", QWEN2_GGUF, "--tokenizer", "/nonexistent/tok", "-p", "x", "-n", "1", *SMALL)
    assert missing.returncode != 0 and "/nonexistent/tok" in missing.stderr, missing.stderr


def test_download_dir_with_a_local_model_is_said():
    with Serve(QWEN2_GGUF, "--port", "0", "--download-dir", "/tmp/nowhere", *SMALL) as s:
        assert s.started(), s.stderr
        _, err = s.stop()
        assert "--download-dir: MODEL" in err and "nothing is downloaded" in err, err
        assert not os.path.exists("/tmp/nowhere")


def test_preemption_mode_and_swap_space_are_honoured_or_refused_by_name():
    # swap without an area: refused when the engine starts, naming the flag that gives one.
    r = run("generate", QWEN2_GGUF, "-p", "Hi", "-n", "2", "--preemption-mode", "swap", *SMALL)
    assert r.returncode not in (0, 134) and r.returncode > 0, (r.returncode, r.stderr)
    assert "preemption mode swap" in r.stderr and "--swap-space" in r.stderr, r.stderr
    assert "--preemption-mode" in refused("--preemption-mode", "sometimes")
    assert "--swap-space" in refused("--swap-space", "-1")
    # An area larger than the machine's memory is refused, not left to fail at the first swap-out.
    r = run("generate", QWEN2_GGUF, "-p", "Hi", "-n", "2", "--swap-space", "100000", *SMALL)
    assert r.returncode not in (0, 134) and r.returncode > 0 and "more than this machine's" in r.stderr, r.stderr
    # With an area, the start-up line says how preemption uses it.
    r = run("generate", QWEN2_GGUF, "-p", "Hi", "-n", "2", "--preemption-mode", "swap", "--swap-space", "0.01",
            *SMALL)
    assert r.returncode == 0, r.stderr
    assert re.search(r"swap space \d+ blocks \(10\.\d MiB\), preemption swaps while it has room", r.stderr), r.stderr
    r = run("generate", QWEN2_GGUF, "-p", "Hi", "-n", "2", "--preemption-mode", "recompute", "--swap-space", "1",
            *SMALL)
    assert r.returncode == 0 and "preemption recomputes (no swap space)" in r.stderr, r.stderr


def engine_limits(*args):
    """max_num_seqs and max_num_batched_tokens of the start-up log's engine line."""
    with Serve(QWEN2_GGUF, "--port", "0", "--device", "cpu", "--log-format", "json", *args, *SMALL) as s:
        assert s.started(), s.stderr
        _, err = s.stop()
    engine = [json.loads(l) for l in err.splitlines() if l.startswith("{") and '"msg":"engine"' in l]
    assert len(engine) == 1, err
    return engine[0]["max_num_seqs"], engine[0]["max_num_batched_tokens"]


def test_unset_limits_are_the_devices_and_the_budget_covers_the_sequences():
    # The CPU's defaults (docs/engine.md, "Default limits"; CUDA's are 256 and 2,048).
    assert engine_limits() == (64, 512)
    assert engine_limits("--max-num-seqs", "8") == (8, 512)
    # A sequence cap above the default budget raises the budget with it, so every decode fits a step.
    assert engine_limits("--max-num-seqs", "600") == (600, 600)
    assert engine_limits("--max-num-batched-tokens", "64") == (64, 64)
