"""The nanoserve package from the source tree (python/) with its compiled half
from the build tree (build/_nanoserve*.so, made by scripts/build), and one LLM
on the default model for the whole suite."""
import pytest

from package_paths import MODEL


@pytest.fixture(scope="session")
def llm():
    from nanoserve import LLM
    return LLM(model=MODEL, max_model_len=512, max_num_seqs=16, kv_cache_memory="64M", threads=2)
