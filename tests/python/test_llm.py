"""The Python package's LLM and SamplingParams, in vLLM's shapes, over the real engine."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import jinja2
import jsonschema
import pytest

from package_paths import MODEL, ROOT
from nanoserve import CompletionOutput, LLM, RequestOutput, SamplingParams, StructuredOutputsParams

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Three colors are", "Once upon a time"]
GREEDY = SamplingParams(temperature=0, max_tokens=12)


def test_generate_shapes(llm):
    outs = llm.generate(PROMPTS[0], GREEDY)
    assert len(outs) == 1 and isinstance(outs[0], RequestOutput)
    out = outs[0]
    assert out.prompt == PROMPTS[0]
    assert out.prompt_token_ids == llm.get_tokenizer().encode(PROMPTS[0])
    c = out.outputs[0]
    assert isinstance(c, CompletionOutput) and c.index == 0
    assert c.finish_reason in ("stop", "length")
    assert 1 <= len(c.token_ids) <= 12
    assert c.text == llm.get_tokenizer().decode(c.token_ids)
    assert c.logprobs is None and c.cumulative_logprob is None


def test_batch_equals_single_calls(llm):
    """N prompts in one call (one batch in the engine) give what N single calls give."""
    batched = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    singles = [llm.generate(p, GREEDY)[0] for p in PROMPTS]
    assert [o.prompt for o in batched] == PROMPTS
    for b, s in zip(batched, singles):
        assert b.outputs[0].token_ids == s.outputs[0].token_ids
        assert b.outputs[0].text == s.outputs[0].text
    assert len({o.outputs[0].text for o in batched}) > 1  # the prompts are answered, not one output copied


def test_token_id_prompts(llm):
    ids = llm.get_tokenizer().encode(PROMPTS[1])
    by_text = llm.generate(PROMPTS[1], GREEDY)[0]
    for prompt in (ids, [ids], {"prompt_token_ids": ids}):
        out = llm.generate(prompt, GREEDY)[0]
        assert out.prompt is None and out.prompt_token_ids == ids
        assert out.outputs[0].token_ids == by_text.outputs[0].token_ids
    assert llm.generate(None, GREEDY, prompt_token_ids=[ids])[0].outputs[0].token_ids == \
        by_text.outputs[0].token_ids


def test_params_per_prompt_and_n(llm):
    outs = llm.generate(PROMPTS[:2], [SamplingParams(temperature=0, max_tokens=3),
                                      SamplingParams(temperature=0.8, seed=7, n=3, max_tokens=8)])
    assert len(outs[0].outputs) == 1 and len(outs[0].outputs[0].token_ids) == 3
    assert outs[0].outputs[0].finish_reason == "length"
    assert [c.index for c in outs[1].outputs] == [0, 1, 2]
    again = llm.generate(PROMPTS[1], SamplingParams(temperature=0.8, seed=7, n=3, max_tokens=8))[0]
    assert [c.token_ids for c in again.outputs] == [c.token_ids for c in outs[1].outputs]  # seeded
    assert len({tuple(c.token_ids) for c in outs[1].outputs}) > 1  # choice i samples with seed + i


def test_logprobs(llm):
    c = llm.generate(PROMPTS[0], SamplingParams(temperature=0, max_tokens=6, logprobs=3))[0].outputs[0]
    assert len(c.logprobs) == len(c.token_ids)
    total = 0.0
    for tok, step in zip(c.token_ids, c.logprobs):
        assert tok in step
        assert step[tok].rank == 1  # greedy: the chosen token is the most likely
        ranked = sorted((lp for lp in step.values() if lp.rank), key=lambda lp: lp.rank)
        assert len(ranked) == 3
        assert all(a.logprob >= b.logprob for a, b in zip(ranked, ranked[1:]))
        assert step[tok].logprob <= 0.0
        total += step[tok].logprob
    assert c.cumulative_logprob == pytest.approx(total, abs=1e-4)


def test_stop_string_and_stop_token(llm):
    free = llm.generate(PROMPTS[2], SamplingParams(temperature=0, max_tokens=16))[0].outputs[0]
    word = free.text.split()[1]
    c = llm.generate(PROMPTS[2], SamplingParams(temperature=0, max_tokens=16, stop=[word]))[0].outputs[0]
    assert c.finish_reason == "stop" and c.stop_reason == word and word not in c.text
    assert free.text.startswith(c.text)
    tok = free.token_ids[2]
    c = llm.generate(PROMPTS[2], SamplingParams(temperature=0, max_tokens=16, stop_token_ids=[tok]))[0].outputs[0]
    assert c.finish_reason == "stop" and c.stop_reason == tok and c.token_ids[-1] == tok


def test_chat_renders_the_models_template(llm):
    """LLM.chat's prompt is the model's own Jinja template (as the GGUF holds it), rendered here by
    jinja2 (the oracle), with Hugging Face's settings."""
    source = llm.get_tokenizer().chat_template
    assert source.startswith("{% for message in messages %}")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a color."}]
    text = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(source).render(messages=messages, add_generation_prompt=True)
    out = llm.chat(messages, SamplingParams(temperature=0, max_tokens=16))[0]
    assert out.prompt_token_ids == llm.get_tokenizer().encode(text, add_special_tokens=False)
    assert out.outputs[0].text.strip()
    # Several conversations at once, each its own output.
    outs = llm.chat([messages, [{"role": "user", "content": "Say hi."}]], SamplingParams(temperature=0, max_tokens=8))
    assert len(outs) == 2 and outs[0].outputs[0].token_ids == out.outputs[0].token_ids[:8]


def test_structured_output_follows_the_schema(llm):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    sp = SamplingParams(temperature=0, max_tokens=48, structured_outputs=StructuredOutputsParams(json=schema))
    out = llm.chat([{"role": "user", "content": "Invent a person; answer in JSON."}], sp)[0].outputs[0]
    jsonschema.validate(json.loads(out.text), schema)
    # Room for the object to close: a value cut by max_tokens is only a prefix.
    obj = llm.generate("A JSON object:", SamplingParams(
        temperature=0, max_tokens=256, structured_outputs=StructuredOutputsParams(json_object=True)))[0]
    assert obj.outputs[0].finish_reason == "stop", obj.outputs[0].text
    assert isinstance(json.loads(obj.outputs[0].text), dict)


@pytest.mark.parametrize("kwargs, name", [
    ({"temperature": -1}, "temperature"), ({"top_p": 1.5}, "top_p"), ({"max_tokens": 0}, "max_tokens"),
    ({"n": 0}, "n"), ({"presence_penalty": 3}, "presence_penalty"), ({"logprobs": 21}, "logprobs"),
    ({"min_p": float("nan")}, "min_p"), ({"stop": 5}, "stop"), ({"seed": "x"}, "seed"),
    ({"structured_outputs": StructuredOutputsParams(regex="a+")}, "structured_outputs.regex"),
    ({"structured_outputs": {"json": {}}}, "structured_outputs"),
])
def test_bad_sampling_params_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        SamplingParams(**kwargs)


def test_bad_generate_arguments_name_the_argument(llm):
    with pytest.raises(ValueError, match=r"^sampling_params: 1 given for 2 prompts"):
        llm.generate(PROMPTS[:2], [GREEDY])
    with pytest.raises(ValueError, match=r"^prompts\[1\]"):
        llm.generate(["ok", []], GREEDY)
    with pytest.raises(ValueError, match=r"^prompts"):
        llm.generate([], GREEDY)
    with pytest.raises(ValueError, match=r"^logit_bias"):
        llm.generate("x", SamplingParams(logit_bias={10**6: 1.0}))
    with pytest.raises(ValueError, match=r"^stop_token_ids"):
        llm.generate("x", SamplingParams(stop_token_ids=[10**6]))
    with pytest.raises(ValueError, match=r"^prompts\[0\]"):
        llm.generate("word " * 600, GREEDY)  # over max_model_len 512
    with pytest.raises(ValueError, match=r"^messages"):
        llm.chat([{"role": "wizard", "content": "hi"}], GREEDY)
    with pytest.raises(ValueError, match=r"^structured_outputs"):
        llm.generate("x", SamplingParams(structured_outputs=StructuredOutputsParams(json={"type": "bogus"})))


@pytest.mark.parametrize("kwargs, name", [
    ({"max_num_seqs": 0}, "max_num_seqs"), ({"max_model_len": -5}, "max_model_len"),
    ({"kv_cache_memory": "lots"}, "kv_cache_memory"), ({"device": "tpu"}, "device"),
    ({"seed": -1}, "seed"), ({"swap_space": 4}, "swap_space"),
])
def test_bad_llm_arguments_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        LLM(model=MODEL, **kwargs)


def test_missing_model_file():
    with pytest.raises(FileNotFoundError, match="no-such.gguf"):
        LLM(model="no-such.gguf")


def test_progress_bar_when_many(llm, capsys):
    llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=4))
    err = capsys.readouterr().err
    assert "Processed prompts" in err and "4/4" in err
    llm.generate(PROMPTS[0], SamplingParams(temperature=0, max_tokens=4))
    assert "Processed prompts" not in capsys.readouterr().err  # one prompt: no bar


def test_gil_is_released_while_the_engine_runs(llm):
    """Another Python thread keeps running during generate. With the GIL held it would run
    only in the 50 ms gaps where the waiting loop takes the GIL back."""
    ticks = []
    done = threading.Event()

    def ticker():
        while not done.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.002)

    t = threading.Thread(target=ticker)
    t.start()
    start = time.monotonic()
    llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=256, ignore_eos=True), use_tqdm=False)
    elapsed = time.monotonic() - start
    done.set()
    t.join()
    during = [x for x in ticks if start <= x <= start + elapsed]
    assert elapsed > 0.3, "the generation was too short to tell"
    assert len(during) > 4 * elapsed / 0.05, (len(during), elapsed)


def test_ctrl_c_aborts_and_the_engine_goes_on(tmp_path):
    """SIGINT during a long generate raises KeyboardInterrupt soon, and the same LLM serves again."""
    script = tmp_path / "interrupt.py"
    script.write_text(f"""
import signal, sys, time
# Python installs its Ctrl-C handler only where SIGINT was not ignored at
# start, and a background job of a non-interactive shell starts with it
# ignored: install it, as a terminal's process would have it.
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {os.path.join(ROOT, 'python')!r})
from nanoserve import LLM, SamplingParams
llm = LLM(model={MODEL!r}, max_model_len=2048, kv_cache_memory="256M", threads=2)
print("loaded", flush=True)
try:
    llm.generate(["a", "b", "c"], SamplingParams(max_tokens=1500, ignore_eos=True), use_tqdm=False)
    print("finished", flush=True)
except KeyboardInterrupt:
    print("interrupted", time.monotonic(), flush=True)
out = llm.generate("The capital of France is", SamplingParams(temperature=0, max_tokens=4))
print("again", len(out[0].outputs[0].token_ids), flush=True)
""")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "loaded"
    time.sleep(1.0)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    lines = out.splitlines()
    assert lines[0].startswith("interrupted"), out
    assert float(lines[0].split()[1]) - sent < 3.0  # aborted within a step or two, not after 1500 tokens
    assert lines[1] == "again 4" and proc.returncode == 0


def test_readme_quickstart_is_the_one_ci_runs():
    """scripts/test runs tests/python/quickstart.py against `pip install .`; the README shows it."""
    readme = open(os.path.join(ROOT, "README.md")).read()
    quickstart = open(os.path.join(ROOT, "tests", "python", "quickstart.py")).read()
    assert "```python\n" + quickstart + "```" in readme
