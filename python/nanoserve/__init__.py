"""nanoserve's offline API, in vLLM's names and shapes.

    from nanoserve import LLM, SamplingParams
    llm = LLM(model="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    for out in llm.generate(["The capital of France is"], SamplingParams(max_tokens=16, temperature=0)):
        print(out.outputs[0].text)

See docs/python.md.
"""
from .outputs import CompletionOutput, Logprob, RequestOutput
from .sampling_params import GuidedDecodingParams, SamplingParams, StructuredOutputsParams
from .llm import LLM

__all__ = ["LLM", "SamplingParams", "StructuredOutputsParams", "GuidedDecodingParams", "RequestOutput",
           "CompletionOutput", "Logprob"]
