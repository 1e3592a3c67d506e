"""SamplingParams: the sampling fields the server honours, in vLLM's names.

Each instance becomes the body of a completions (or chat) request that the
server's own parser reads, so every field is checked, and refused by name,
exactly as `nanoserve serve` checks it; the checks that need no model run
when the instance is made, the rest (token ids against the vocabulary, the
context length, the JSON schema) in LLM.generate.
"""
import json
import math
from dataclasses import dataclass, field, fields
from typing import Any, Optional, Union


@dataclass
class StructuredOutputsParams:
    """Structured output: `json` (a JSON schema, as a dict or a JSON string) or `json_object`."""
    json: Union[dict, str, None] = None
    json_object: bool = False
    # vLLM's other kinds; the server does not decode under them, so they are refused by name.
    regex: Optional[str] = None
    choice: Optional[list] = None
    grammar: Optional[str] = None

    def response_format(self) -> dict:
        for name in ("regex", "choice", "grammar"):
            if getattr(self, name) is not None:
                raise ValueError(f"structured_outputs.{name}: not supported; use json (a JSON schema) "
                                 "or json_object")
        if self.json is not None and self.json_object:
            raise ValueError("structured_outputs: give json or json_object, not both")
        if self.json is not None:
            schema = self.json
            if isinstance(schema, str):
                try:
                    schema = json.loads(schema)
                except ValueError as e:
                    raise ValueError(f"structured_outputs.json: not JSON: {e}") from None
            if not isinstance(schema, dict):
                raise ValueError("structured_outputs.json: must be a JSON schema object")
            return {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
        if self.json_object:
            return {"type": "json_object"}
        raise ValueError("structured_outputs: give json (a JSON schema) or json_object=True")


GuidedDecodingParams = StructuredOutputsParams  # vLLM's earlier name


@dataclass
class SamplingParams:
    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: off
    min_p: float = 0.0
    seed: Optional[int] = None
    stop: Union[str, list[str], None] = None
    stop_token_ids: Optional[list[int]] = None
    ignore_eos: bool = False
    max_tokens: Optional[int] = 16  # None: up to the context length
    min_tokens: int = 0
    logprobs: Optional[int] = None  # the chosen token's logprob and this many alternatives
    logit_bias: Optional[dict[int, float]] = None
    structured_outputs: Optional[StructuredOutputsParams] = None
    guided_decoding: Optional[StructuredOutputsParams] = None  # vLLM's earlier name
    extra_args: dict = field(default_factory=dict, repr=False)  # accepted and unused, as in vLLM

    def __post_init__(self):
        from . import _engine
        if self.structured_outputs is not None and self.guided_decoding is not None:
            raise ValueError("structured_outputs: give it or guided_decoding, not both")
        for name in ("structured_outputs", "guided_decoding"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, StructuredOutputsParams):
                raise ValueError(f"{name}: must be a StructuredOutputsParams, not {type(value).__name__}")
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{f.name}: must be finite, got {value!r}")
        error = _engine.module().check_request(json.dumps(self.request_fields()))
        if error is not None:
            param, message = error
            raise ValueError(f"{_argument_name(param)}: {message}")

    def request_fields(self) -> dict[str, Any]:
        """The fields of a completions request body that ask for this sampling."""
        body: dict[str, Any] = {}
        for f in fields(self):
            name, value = f.name, getattr(self, f.name)
            if name in ("structured_outputs", "guided_decoding", "extra_args") or value is None:
                continue
            if name == "top_k" and value == 0:
                value = -1  # vLLM's 0 is the API's -1: off
            if name == "logit_bias" and isinstance(value, dict):
                value = {str(k): v for k, v in value.items()}
            body[name] = value
        so = self.structured_outputs or self.guided_decoding
        if so is not None:
            body["response_format"] = so.response_format()
        return body


def _argument_name(param: Optional[str]) -> str:
    """The Python argument behind a request field the server names."""
    return {"response_format": "structured_outputs", "prompt": "prompts", "": "sampling_params",
            None: "sampling_params"}.get(param, param)
