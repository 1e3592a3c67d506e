"""The nanoserve package from the source tree (python/) with its compiled half
from the build tree (build/_nanoserve*.so, made by scripts/build), and one LLM
on the default model for the whole suite."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture(scope="session")
def llm():
    from nanoserve import LLM
    return LLM(model=MODEL, max_model_len=512, max_num_seqs=16, kv_cache_memory="64M", threads=2)
