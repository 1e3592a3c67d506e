"""What LLM.generate and LLM.chat return: vLLM's RequestOutput and CompletionOutput."""
from dataclasses import dataclass, field
from typing import Optional, Union


@dataclass
class Logprob:
    """One token's log-probability under the model's raw distribution (vLLM's Logprob)."""
    logprob: float
    rank: Optional[int] = None  # 1 for the most likely; None for a chosen token outside the top
    decoded_token: Optional[str] = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[list[dict[int, Logprob]]]  # one dict per generated token, when asked for
    finish_reason: Optional[str] = None  # "stop", "length" or "abort"
    stop_reason: Union[int, str, None] = None  # the stop string or stop token that ended it

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    request_id: str
    prompt: Optional[str]
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)
    finished: bool = True
    prompt_logprobs: None = None
