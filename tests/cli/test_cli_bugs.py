"""The seven command-line bugs of issue 38, each driven through the built
binary: a value out of range is refused by name before anything starts, never
after "listening" and never by an abort."""
import os
import re

import pytest
import requests

from cli_process import QWEN2_GGUF, SMALL, Serve, run


@pytest.mark.parametrize("port", ["80000", "-1", "65536"])
def test_port_out_of_range_is_refused(port):
    with Serve(QWEN2_GGUF, "--port", port, *SMALL) as s:
        assert not s.started(), "a server started on an out-of-range port"
        assert s.rc not in (0, 134), s.stderr
        assert "--port" in s.stderr and "65535" in s.stderr, s.stderr
        assert "listening" not in "".join(s.stdout_lines)


@pytest.mark.parametrize("flag,value", [("--max-num-seqs", "0"), ("--max-num-seqs", "-1"),
                                        ("--max-num-batched-tokens", "0"), ("--max-num-batched-tokens", "-5")])
def test_zero_step_limits_are_refused_by_name_before_listening(flag, value):
    with Serve(QWEN2_GGUF, "--port", "0", flag, value, *SMALL) as s:
        assert not s.started()
        assert s.rc == 2, (s.rc, s.stderr)  # a usage error, not an abort (134)
        assert f"{flag} must be >= 1" in s.stderr, s.stderr
        assert "listening" not in "".join(s.stdout_lines)
        assert "check failed" not in s.stderr


@pytest.mark.parametrize("command", ["generate", "bench"])
def test_zero_step_limits_are_refused_by_the_other_commands(command):
    extra = ["-p", "hi", "-n", "2"] if command == "generate" else ["--num-prompts", "1", "--input-len", "4",
                                                                  "--output-len", "2"]
    r = run(command, QWEN2_GGUF, "--max-num-seqs", "0", *extra, *SMALL)
    assert r.returncode != 0 and r.returncode != 134 and r.returncode > 0, (r.returncode, r.stderr)
    assert "--max-num-seqs must be >= 1" in r.stderr, r.stderr


def test_max_model_len_above_the_context_is_refused_naming_both():
    # The fixture's context (max_position_embeddings, GGUF context_length) is 256.
    with Serve(QWEN2_GGUF, "--port", "0", "--max-model-len", "100000", *SMALL) as s:
        assert not s.started()
        assert s.rc == 2, (s.rc, s.stderr)
        assert "--max-model-len 100000" in s.stderr and "256" in s.stderr, s.stderr
        assert "--allow-long-max-model-len" in s.stderr, s.stderr  # the override is named
        assert "listening" not in "".join(s.stdout_lines)


def test_max_model_len_override_by_flag_or_vllm_env():
    for args, env in ((["--allow-long-max-model-len"], None), ([], {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})):
        with Serve(QWEN2_GGUF, "--port", "0", "--max-model-len", "512", *args, *SMALL, env=env) as s:
            assert s.started(), s.stderr
            out, err = s.stop()
            assert "max_model_len 512" in out, out
            assert "above the model's context length 256" in err, err


def test_max_model_len_at_or_below_the_context_is_taken():
    with Serve(QWEN2_GGUF, "--port", "0", "--max-model-len", "256", *SMALL) as s:
        assert s.started(), s.stderr
        out, _ = s.stop()
        assert "max_model_len 256" in out


def test_ipv6_host_is_printed_in_brackets():
    with Serve(QWEN2_GGUF, "--port", "0", "--host", "::1", *SMALL) as s:
        assert s.started(), s.stderr
        assert re.search(r"http://\[::1\]:\d+", s.stdout_lines[0]), s.stdout_lines
        # The printed URL is one a client can use as it is.
        assert requests.get(s.url + "/health", timeout=5).status_code == 200
        out, _ = s.stop()
        assert re.search(r"ready, serving .* on http://\[::1\]:\d+", out), out


def test_several_served_model_names_each_answer():
    with Serve(QWEN2_GGUF, "--port", "0", "--served-model-name", "alpha", "beta", *SMALL) as s:
        assert s.started(), s.stderr
        ids = [m["id"] for m in requests.get(s.url + "/v1/models", timeout=5).json()["data"]]
        assert ids == ["alpha", "beta"], ids
        # Each name is answered; responses name the model by its first name, as vLLM's do.
        for name in ("alpha", "beta"):
            r = requests.post(s.url + "/v1/completions", json={"model": name, "prompt": "a b", "max_tokens": 2},
                              timeout=30)
            assert r.status_code == 200 and r.json()["model"] == "alpha", r.text
            assert requests.get(s.url + "/v1/models/" + name, timeout=5).json()["id"] == name
        r = requests.post(s.url + "/v1/completions", json={"model": "gamma", "prompt": "a b", "max_tokens": 2},
                          timeout=30)
        assert r.status_code == 404 and "gamma" in r.json()["error"]["message"], r.text


def test_unknown_command_is_named():
    r = run("foo")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "'foo'" in r.stderr and "serve" in r.stderr, r.stderr


def test_threads_far_above_the_cores_warn_once():
    cores = os.cpu_count()
    many = run("generate", QWEN2_GGUF, "-p", "hi", "-n", "1", "--threads", str(cores * 8), "--kv-cache-memory",
               "16M")
    assert many.returncode == 0, many.stderr
    assert many.stderr.count(f"--threads {cores * 8}") == 1, many.stderr
    assert f"{cores} cores" in many.stderr, many.stderr
    few = run("generate", QWEN2_GGUF, "-p", "hi", "-n", "1", "--threads", "1", "--kv-cache-memory", "16M")
    assert few.returncode == 0 and "--threads" not in few.stderr, few.stderr
