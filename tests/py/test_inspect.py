"""`nanoserve inspect` against the gguf package's reader of the same file."""
import math
import os
import re
import subprocess

import pytest
from gguf import GGUFReader

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.path.join(ROOT, "build", "nanoserve")
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def inspect(*args):
    assert os.path.exists(BINARY), "build nanoserve first (scripts/build)"
    return subprocess.run([BINARY, "inspect", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def reader():
    return GGUFReader(MODEL)


@pytest.fixture(scope="module")
def output():
    r = inspect(MODEL)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_tensor_table_matches_gguf_reader(reader, output):
    rows = {}
    for line in output.splitlines():
        m = re.match(r"^  (\S+)\s+\[([0-9, ]*)\]\s+(\S+)\s+(\d+)$", line)
        if m:
            rows[m.group(1)] = ([int(x) for x in m.group(2).split(", ")], m.group(3), int(m.group(4)))
    assert len(rows) == len(reader.tensors)
    for t in reader.tensors:
        shape, dtype, nbytes = rows[t.name]
        assert shape == [int(x) for x in reversed(t.shape)], t.name  # outermost first
        assert dtype == t.tensor_type.name
        assert nbytes == int(t.n_bytes)
    params = sum(math.prod(int(x) for x in t.shape) for t in reader.tensors)
    assert f"total: {len(reader.tensors)} tensors, {params} params" in output


def test_hyperparameters_tokenizer_and_template(reader, output):
    assert "architecture: llama" in output
    assert "layers 30, dim 576, ffn 1536, vocab 49152, context 8192" in output
    assert "heads 9, kv heads 3 (n_rep 3), head_dim 64" in output
    assert "rope theta 100000" in output
    assert "embeddings tied" in output
    tokens = reader.fields["tokenizer.ggml.tokens"]
    assert f"tokenizer: gpt2 (pre smollm), {len(tokens.data)} tokens" in output
    assert "bos 1 '<|im_start|>', eos 2 '<|im_end|>'" in output
    template = bytes(reader.fields["tokenizer.chat_template"].parts[-1]).decode()
    for line in template.splitlines():
        assert "  " + line in output


def test_metadata_listing_names_every_key(reader):
    r = inspect(MODEL, "--metadata", "--no-tensors")
    assert r.returncode == 0, r.stderr
    for key in reader.fields:
        if not key.startswith("GGUF."):
            assert f"  {key} " in r.stdout
    assert "tensors:" not in r.stdout


def test_broken_files_exit_1_with_status(tmp_path):
    truncated = tmp_path / "head.gguf"
    with open(MODEL, "rb") as f:
        truncated.write_bytes(f.read(4096))
    r = inspect(str(truncated))
    assert r.returncode == 1
    assert "DATA_LOSS" in r.stderr and "at offset" in r.stderr
    r = inspect(str(tmp_path / "missing.gguf"))
    assert r.returncode == 1
    assert "NOT_FOUND" in r.stderr
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    r = inspect(str(empty))
    assert r.returncode == 1 and "magic at offset 0" in r.stderr


def tensor_offset_field(data, name):
    """Byte position of tensor `name`'s u64 offset field in a GGUF header."""
    key = len(name).to_bytes(8, "little") + name.encode()
    at = data.index(key) + len(key)
    n_dims = int.from_bytes(data[at:at + 4], "little")
    return at + 4 + 8 * n_dims + 4


def test_overlapping_tensors_are_refused_by_inspect_and_generate(tmp_path):
    with open(MODEL, "rb") as f:
        data = bytearray(f.read())
    q = tensor_offset_field(data, "blk.0.attn_q.weight")
    k = tensor_offset_field(data, "blk.0.attn_k.weight")
    data[q:q + 8] = data[k:k + 8]  # attn_q placed over attn_k
    bad = tmp_path / "overlap.gguf"
    bad.write_bytes(bytes(data))
    want = "tensor 'blk.0.attn_q.weight': offset at offset %d" % q
    r = inspect(str(bad))
    assert r.returncode == 1, r.stdout[-500:]
    assert "DATA_LOSS" in r.stderr and want in r.stderr and "overlaps tensor 'blk.0.attn_k.weight'" in r.stderr
    g = subprocess.run([BINARY, "generate", "-m", str(bad), "-p", "x", "-n", "1"], capture_output=True, text=True,
                       timeout=120)
    assert g.returncode == 1, g.stdout[-500:]
    assert want in g.stderr and "overlaps tensor 'blk.0.attn_k.weight'" in g.stderr
