"""The default model's tokenizer.json exactly as the libraries write it loads
unedited through `nanoserve tokenize -m FOLDER`, with the GGUF tokenizer's ids:
  library_written       what tests/fixtures/hf/make_hf_folder.py writes (the
                        `tokenizers` library's Tokenizer.save; normalizer null)
  empty_normalizer_seq  the same pipeline with the normalizer the library
                        writes as {"type": "Sequence", "normalizers": []}
  build_fixture         the HF folder scripts/test makes under build/, when present
and transformers' own GGUF conversion (AutoTokenizer.from_pretrained(...,
gguf_file=...).save_pretrained: an empty normalizer Sequence, a ByteLevel
pre-tokenizer without the digit split, a ByteFallback/Fuse/Replace/ByteLevel
decoder), which is a different pipeline: its ids must equal the `tokenizers`
library's on the same file."""
import json
import os
import shutil
import subprocess
import sys
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.path.join(ROOT, "build", "nanoserve")
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
BUILD_FIXTURE = os.path.join(ROOT, "build", "fixtures", "hf", "smollm2-135m")
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures", "hf"))
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures", "tokenizer"))


def ids(model, text):
    assert os.path.exists(BINARY), "build nanoserve first (scripts/build)"
    r = subprocess.run([BINARY, "tokenize", "--ids-only", "--no-bos", "-m", model, text], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [int(x) for x in r.stdout.split()]


@pytest.fixture(scope="module")
def texts():
    with open(os.path.join(ROOT, "tests", "fixtures", "tokenizer", "corpus.json"), encoding="utf-8") as f:
        corpus = [e["text"] for e in json.load(f) if "text" in e and e["text"] and not e["text"].startswith("-")
                  and "\x00" not in e["text"]]
    return corpus[::9][:36] + ["<|im_start|>user\nHi 123 4567<|im_end|>", "  leading spaces\n\n\ttabs", "x 1 22 333"]


@pytest.fixture(scope="module")
def gguf_ids(texts):
    return [ids(MODEL, t) for t in texts]


def gguf_config(out):
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from transformers import LlamaConfig

    gguf_utils.is_torch_available = lambda: True  # the config only: no tensor is read
    gguf_utils.torch = types.SimpleNamespace(from_numpy=lambda a: a)
    cfg = gguf_utils.load_gguf_checkpoint(MODEL, return_tensors=False)["config"]
    LlamaConfig(**{k: v for k, v in cfg.items() if k != "model_type"}).save_pretrained(out)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    import make_hf_folder
    from tokenizers import Tokenizer, normalizers

    root = tmp_path_factory.mktemp("hf_tokenizers")
    written = str(root / "library_written")
    os.makedirs(written)
    gguf_config(written)
    make_hf_folder.write_tokenizer(MODEL, written)
    empty = str(root / "empty_normalizer_seq")
    shutil.copytree(written, empty)
    tok = Tokenizer.from_file(os.path.join(empty, "tokenizer.json"))
    tok.normalizer = normalizers.Sequence([])
    tok.save(os.path.join(empty, "tokenizer.json"))
    return {"library_written": written, "empty_normalizer_seq": empty}


def test_library_written_files_have_the_shapes_under_test(folders):
    with open(os.path.join(folders["library_written"], "tokenizer.json"), encoding="utf-8") as f:
        assert json.load(f)["normalizer"] is None
    with open(os.path.join(folders["empty_normalizer_seq"], "tokenizer.json"), encoding="utf-8") as f:
        assert json.load(f)["normalizer"] == {"type": "Sequence", "normalizers": []}


@pytest.mark.parametrize("variant", ["library_written", "empty_normalizer_seq"])
def test_loads_unedited_with_the_gguf_ids(folders, texts, gguf_ids, variant):
    got = [ids(folders[variant], t) for t in texts]
    differ = [t for t, a, b in zip(texts, got, gguf_ids) if a != b]
    assert not differ, f"{len(differ)} of {len(texts)} differ from the GGUF tokenizer, e.g. {differ[:3]!r}"


@pytest.mark.skipif(not os.path.exists(os.path.join(BUILD_FIXTURE, "config.json")),
                    reason="run tests/fixtures/hf/make_hf_folder.py (scripts/test does)")
def test_build_fixture_loads_unedited_with_the_gguf_ids(texts, gguf_ids):
    got = [ids(BUILD_FIXTURE, t) for t in texts]
    assert got == gguf_ids


def test_transformers_gguf_conversion_loads_with_the_library_ids(tmp_path, texts, gguf_ids):
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    gguf_utils.is_torch_available = lambda: True
    gguf_utils.torch = types.SimpleNamespace(from_numpy=lambda a: a)
    out = str(tmp_path)
    AutoTokenizer.from_pretrained(os.path.dirname(MODEL), gguf_file=os.path.basename(MODEL)).save_pretrained(out)
    gguf_config(out)
    with open(os.path.join(out, "tokenizer.json"), encoding="utf-8") as f:
        assert json.load(f)["normalizer"] == {"type": "Sequence", "normalizers": []}
    oracle = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    got = [ids(out, t) for t in texts]
    want = [oracle.encode(t, add_special_tokens=False).ids for t in texts]
    differ = [t for t, a, b in zip(texts, got, want) if a != b]
    assert not differ, f"{len(differ)} of {len(texts)} differ from the library, e.g. {differ[:3]!r}"
    same_as_gguf = sum(a == b for a, b in zip(got, gguf_ids))
    print(f"transformers' conversion: {same_as_gguf}/{len(texts)} texts with the GGUF tokenizer's ids")
