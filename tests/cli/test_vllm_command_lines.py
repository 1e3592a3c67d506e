"""`vllm serve` command lines pasted from vLLM's documentation, each run as
`nanoserve serve` with the same flags. The hub id becomes the default model's
file (the one model CI has), and a fixed port becomes 0 (a free one), so that
the suite runs anywhere; nothing else is changed. Each line either starts
(/health answers 200) or is refused with exit 2 and a message that names the
flag and says why."""
import os
import shlex

import pytest
import requests

from cli_process import ROOT, Serve

DEFAULT_MODEL = os.environ.get("NANOSERVE_MODEL") or os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
START = "start"

# (where in vLLM's docs, the command line, START or the flag it is refused by)
LINES = [
    ("getting_started/quickstart", "vllm serve Qwen/Qwen2.5-1.5B-Instruct", START),
    ("getting_started/quickstart", "vllm serve Qwen/Qwen2.5-1.5B-Instruct --generation-config vllm", START),
    ("serving/openai_compatible_server",
     "vllm serve NousResearch/Meta-Llama-3-8B-Instruct --dtype auto --api-key token-abc123", START),
    ("cli (model configuration)",
     "vllm serve meta-llama/Llama-3.2-1B-Instruct --dtype auto --max-model-len 4096 --trust-remote-code", START),
    ("cli/serve (custom host and port)", "vllm serve facebook/opt-125m --host 0.0.0.0 --port 8080", START),
    ("cli (specify the port)", "vllm serve meta-llama/Llama-2-7b-hf --port 8100", START),
    ("cli/serve (prefix caching)", "vllm serve meta-llama/Llama-2-7b-hf --enable-prefix-caching", START),
    ("deployment/docker", "--model mistralai/Mistral-7B-v0.1", START),
    ("getting_started/installation/cpu (docker)",
     "--model=meta-llama/Llama-3.2-1B-Instruct --dtype=bfloat16", START),
    ("features/quantization/gguf",
     "vllm serve ./tinyllama-1.1b-chat-v1.0.Q4_K_M.gguf --tokenizer TinyLlama/TinyLlama-1.1B-Chat-v1.0", START),
    ("serving/offline_inference (CPU, tensor parallel)",
     "vllm serve meta-llama/Llama-2-7b-chat-hf -tp=2 --distributed-executor-backend mp", "--tensor-parallel-size"),
    ("cli/serve (tensor parallelism)", "vllm serve meta-llama/Llama-2-70b-hf --tensor-parallel-size 4",
     "--tensor-parallel-size"),
    ("serving/distributed_serving", "vllm serve gpt2 --tensor-parallel-size 4 --pipeline-parallel-size 2",
     "--tensor-parallel-size"),
    ("cli (data parallel)",
     "vllm serve meta-llama/Llama-3.2-1B-Instruct --data-parallel-size 4 --tensor-parallel-size 2",
     "--tensor-parallel-size"),
    ("cli/serve (quantization)", "vllm serve TheBloke/Llama-2-13B-AWQ --quantization awq", "--quantization"),
    ("features/lora",
     "vllm serve meta-llama/Llama-2-7b-hf --enable-lora --lora-modules sql-lora=$HOME/.cache/sql-lora",
     "--enable-lora"),
    # On a CPU run there is no GPU memory to divide: refused, naming it (it starts on CUDA).
    ("cli/serve (memory and context length)",
     "vllm serve mistralai/Mistral-7B-v0.1 --gpu-memory-utilization 0.95 --max-model-len 8192",
     "--gpu-memory-utilization"),
]


def adapt(line):
    """The nanoserve arguments of a pasted line: the model id (the first
    positional, or --model's value) becomes the default model, a port 0."""
    args = shlex.split(line)
    if args[:2] == ["vllm", "serve"]:
        args = args[2:]
    out, i = [], 0
    while i < len(args):
        a = args[i]
        if a.startswith("--model="):
            out.append("--model=" + DEFAULT_MODEL)
        elif a == "--model":
            out += [a, DEFAULT_MODEL]
            i += 1
        elif a == "--port":
            out += [a, "0"]
            i += 1
        elif a == "--tokenizer":
            out += [a, DEFAULT_MODEL]
            i += 1
        elif i == 0 and not a.startswith("-"):
            out.append(DEFAULT_MODEL)
        else:
            out.append(a)
        i += 1
    if "--port" not in out:
        out += ["--port", "0"]
    return out


@pytest.mark.parametrize("where,line,outcome", LINES, ids=[line for _, line, _ in LINES])
def test_pasted_vllm_command_line(where, line, outcome):
    assert os.path.exists(DEFAULT_MODEL), "scripts/fetch-model puts the default model in models/"
    with Serve(*adapt(line)) as s:
        if outcome == START:
            assert s.started(), f"{where}: {line}\n{s.stderr}"
            if "--api-key" in line:
                body = {"prompt": "Hi", "max_tokens": 1}
                assert requests.post(s.url + "/v1/completions", json=body, timeout=30).status_code == 401
                ok = requests.post(s.url + "/v1/completions", json=body, timeout=30,
                                   headers={"Authorization": "Bearer token-abc123"})
                assert ok.status_code == 200, ok.text
            return
        assert not s.started(), f"{where}: {line} started; expected a refusal naming {outcome}"
        assert s.rc == 2, (s.rc, s.stderr)
        message = s.stderr.strip()
        assert outcome in message, message
        # The flag's name, then why: more than the bare name.
        reason = message.split(outcome, 1)[1]
        assert len(reason.strip(" :")) > 10, message


def test_at_least_ten_lines_start_and_the_rest_are_refused():
    assert sum(outcome == START for _, _, outcome in LINES) >= 10
    assert len(LINES) >= 15
