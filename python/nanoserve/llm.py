"""LLM: vLLM's offline entry point over nanoserve's engine.

Every prompt of a call goes to the engine at once, in one submit, and the
engine batches them continuously (the server's engine thread, not a second
loop). The wait runs with the GIL released; Ctrl-C aborts the batch in the
engine and raises KeyboardInterrupt.
"""
import json
import math
import sys
from collections.abc import Sequence
from typing import Any, Optional, Union

from . import _engine
from .outputs import CompletionOutput, Logprob, RequestOutput
from .sampling_params import SamplingParams, _argument_name

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _bytes(name: str, value: Union[int, float, str, None]) -> int:
    if value is None:
        return 0
    if isinstance(value, bool):
        raise ValueError(f"{name}: must be a byte count, not a bool")
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name}: must be > 0 bytes, got {value!r}")
        return int(value)
    if isinstance(value, str):
        s = value.strip().upper().removesuffix("IB").removesuffix("B")
        unit = s[-1:] if s[-1:] in _UNITS and s[-1:] else ""
        try:
            n = float(s[: len(s) - len(unit)])
        except ValueError:
            n = -1.0
        if n > 0 and math.isfinite(n):
            return int(n * _UNITS[unit])
    raise ValueError(f"{name}: {value!r} is not a byte count (e.g. 1073741824, '512M', '2G')")


def _int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: must be an integer >= {minimum}, got {value!r}")
    return value


class LLM:
    """A model loaded once, for many generate() and chat() calls.

    model: a GGUF file or a Hugging Face folder. device: "auto", "cpu" or "cuda".
    max_model_len: prompt + output tokens (None: the model's). max_num_seqs:
    sequences per step (None: 64 on the CPU, 256 on CUDA). kv_cache_memory: bytes of the KV pool (int, or "512M").
    seed: seeds requests that bring none of their own.
    """

    def __init__(self, model: str, *, device: str = "auto", max_model_len: Optional[int] = None,
                 max_num_seqs: Optional[int] = None, kv_cache_memory: Union[int, str, None] = None,
                 seed: int = 0, threads: int = 0, chat_template: Optional[str] = None,
                 tokenizer: Optional[str] = None, **kwargs):
        unknown = sorted(k for k in kwargs if k not in ("dtype", "trust_remote_code", "tensor_parallel_size"))
        if unknown:
            raise ValueError(f"{unknown[0]}: not an argument of nanoserve's LLM")
        if kwargs.get("tensor_parallel_size", 1) != 1:
            raise ValueError("tensor_parallel_size: only 1 is supported")
        if tokenizer is not None and tokenizer != model:
            raise ValueError("tokenizer: the model's own tokenizer is used; a separate one is not supported")
        if not isinstance(model, str) or not model:
            raise ValueError("model: a path to a GGUF file or a Hugging Face folder")
        if device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device: {device!r} is not 'auto', 'cpu' or 'cuda'")
        self._engine = _engine.module().Engine(
            model=model, device=device,
            max_model_len=0 if max_model_len is None else _int("max_model_len", max_model_len, 1),
            max_num_seqs=0 if max_num_seqs is None else _int("max_num_seqs", max_num_seqs, 1),
            kv_cache_memory=_bytes("kv_cache_memory", kv_cache_memory),
            seed=_int("seed", seed, 0), threads=_int("threads", threads, 0), chat_template=chat_template or "")

    @property
    def max_model_len(self) -> int:
        return self._engine.max_model_len

    @property
    def device(self) -> str:
        return self._engine.device

    def get_tokenizer(self):
        return _Tokenizer(self._engine)

    def generate(self, prompts, sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
                 *, use_tqdm: bool = True, prompt_token_ids: Optional[list[list[int]]] = None
                 ) -> list[RequestOutput]:
        """prompts: a string, a list of token ids, {"prompt_token_ids": [...]} or {"prompt": str},
        or a list of those. One RequestOutput per prompt, in order."""
        if prompt_token_ids is not None:
            if prompts is not None:
                raise ValueError("prompt_token_ids: give prompts or prompt_token_ids, not both")
            prompts = prompt_token_ids
        items = _prompt_list(prompts)
        params = _params_list(sampling_params, len(items))
        bodies, texts = [], []
        for i, (p, sp) in enumerate(zip(items, params)):
            if isinstance(p, str):
                prompt, text = p, p
            elif isinstance(p, dict) and "prompt_token_ids" in p:
                prompt, text = _token_ids(p["prompt_token_ids"], i), p.get("prompt")
            elif isinstance(p, dict) and "prompt" in p:
                prompt, text = p["prompt"], p["prompt"]
                if not isinstance(prompt, str):
                    raise ValueError(f"prompts[{i}]: 'prompt' must be a string")
            else:
                prompt, text = _token_ids(p, i), None
            bodies.append(json.dumps({"prompt": prompt, **sp.request_fields()}))
            texts.append(text)
        results = self._run("completion", bodies, use_tqdm)
        return [_request_output(i, texts[i], ids, choices, params[i], self._engine)
                for i, (ids, choices) in enumerate(results)]

    def chat(self, messages, sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
             *, use_tqdm: bool = True, chat_template: Optional[str] = None, add_generation_prompt: bool = True,
             chat_template_kwargs: Optional[dict] = None) -> list[RequestOutput]:
        """messages: one conversation (a list of {"role", "content"}) or a list of them, rendered
        through the model's chat template (or `chat_template`). One RequestOutput per conversation."""
        if not isinstance(messages, (list, tuple)) or not messages:
            raise ValueError("messages: a list of {'role', 'content'} messages, or a list of such lists")
        conversations = [messages] if isinstance(messages[0], dict) else list(messages)
        for i, c in enumerate(conversations):
            if not isinstance(c, (list, tuple)) or not all(isinstance(m, dict) for m in c):
                raise ValueError(f"messages[{i}]: a conversation is a list of {{'role', 'content'}} dicts")
        params = _params_list(sampling_params, len(conversations))
        bodies = []
        for c, sp in zip(conversations, params):
            body = {"messages": list(c)}
            if chat_template is not None:
                body["chat_template"] = chat_template
            if chat_template_kwargs is not None:
                body["chat_template_kwargs"] = chat_template_kwargs
            fields = sp.request_fields()
            if "logprobs" in fields:  # chat's logprobs is a bool with top_logprobs beside it
                fields["top_logprobs"] = fields.pop("logprobs")
                fields["logprobs"] = True
            bodies.append(json.dumps({**body, **fields}))
        results = self._run("chat", bodies, use_tqdm, add_generation_prompt=bool(add_generation_prompt))
        return [_request_output(i, self._engine.decode(ids), ids, choices, params[i], self._engine)
                for i, (ids, choices) in enumerate(results)]

    def _run(self, endpoint: str, bodies: list[str], use_tqdm: bool, add_generation_prompt: bool = True):
        bar = _progress(len(bodies)) if use_tqdm and len(bodies) > 1 else None
        try:
            status, *rest = self._engine.run(endpoint, bodies, bar.update if bar else None, add_generation_prompt)
        finally:
            if bar:
                bar.close()
        if status == "error":
            index, param, message = rest
            name = _argument_name(param)
            if name in ("prompts", "messages"):
                raise ValueError(f"{name}[{index}]: {message}")
            raise ValueError(f"{name}: {message}" + (f" (prompt {index})" if len(bodies) > 1 else ""))
        return rest[0]


class _Tokenizer:
    """The model's tokenizer: encode and decode, as LLM.get_tokenizer() offers in vLLM."""

    def __init__(self, engine):
        self._engine = engine

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._engine.encode(text, add_special_tokens)

    def decode(self, ids: list[int]) -> str:
        return self._engine.decode(list(ids))

    @property
    def chat_template(self) -> str:
        """The Jinja chat template LLM.chat renders (the model's, or LLM's chat_template)."""
        return self._engine.chat_template


class _progress:
    """tqdm's bar when tqdm is there (on stderr), else one line redrawn."""

    def __init__(self, total: int):
        self.total, self.bar = total, None
        try:
            from tqdm.auto import tqdm
            self.bar = tqdm(total=total, desc="Processed prompts", unit="prompt", dynamic_ncols=True)
        except ImportError:
            pass
        self.done = 0

    def update(self, done: int, total: int, output_tokens: int):
        if self.bar is not None:
            self.bar.set_postfix_str(f"{output_tokens} output tokens", refresh=False)
            self.bar.update(done - self.done)
        else:
            sys.stderr.write(f"\rProcessed prompts: {done}/{total}, {output_tokens} output tokens")
        self.done = done

    def close(self):
        if self.bar is not None:
            self.bar.close()
        else:
            sys.stderr.write("\n")


def _prompt_list(prompts) -> list:
    if isinstance(prompts, (str, dict)):
        return [prompts]
    if isinstance(prompts, (list, tuple)):
        if not prompts:
            raise ValueError("prompts: empty")
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompts):
            return [list(prompts)]  # one prompt of token ids
        return list(prompts)
    raise ValueError(f"prompts: a string, token ids, or a list of them, not {type(prompts).__name__}")


def _token_ids(p, index: int) -> list[int]:
    if not isinstance(p, (list, tuple)) or not p or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in p):
        raise ValueError(f"prompts[{index}]: a string, a non-empty list of token ids, or "
                         "{'prompt_token_ids': [...]}")
    return list(p)


def _params_list(sampling_params, n: int) -> list[SamplingParams]:
    if sampling_params is None:
        return [SamplingParams()] * n
    if isinstance(sampling_params, SamplingParams):
        return [sampling_params] * n
    if isinstance(sampling_params, (list, tuple)):
        if len(sampling_params) != n:
            raise ValueError(f"sampling_params: {len(sampling_params)} given for {n} prompts")
        for i, sp in enumerate(sampling_params):
            if not isinstance(sp, SamplingParams):
                raise ValueError(f"sampling_params[{i}]: must be a SamplingParams")
        return list(sampling_params)
    raise ValueError(f"sampling_params: a SamplingParams or a list of them, not {type(sampling_params).__name__}")


def _piece(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


def _request_output(i: int, prompt: Optional[str], prompt_ids: list[int], choices: list[dict],
                    sp: SamplingParams, engine) -> RequestOutput:
    outputs = []
    for index, c in enumerate(choices):
        if c["finish_reason"] == "error":
            raise RuntimeError(f"prompt {i}: the engine failed: {c['error']}")
        logprobs = None
        if "logprobs" in c:
            logprobs = []
            for (tok, lp, piece), *top in c["logprobs"]:
                step = {t: Logprob(l, rank + 1, _piece(p)) for rank, (t, l, p) in enumerate(top)}
                if tok not in step:
                    step[tok] = Logprob(lp, None, _piece(piece))
                logprobs.append(step)
        stop_reason = c["stop_reason"] or None
        if stop_reason is None and c["finish_reason"] == "stop" and c["token_ids"]:
            last = c["token_ids"][-1]
            if sp.stop_token_ids and last in sp.stop_token_ids:
                stop_reason = last
        outputs.append(CompletionOutput(index=index, text=c["text"], token_ids=list(c["token_ids"]),
                                        cumulative_logprob=c.get("cumulative_logprob"), logprobs=logprobs,
                                        finish_reason=c["finish_reason"], stop_reason=stop_reason))
    return RequestOutput(request_id=str(i), prompt=prompt, prompt_token_ids=list(prompt_ids), outputs=outputs)
