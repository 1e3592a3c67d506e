"""The trained tokenizers' expected ids (tests/fixtures/tokenizer/trained/
expected.json, which the C++ parity test reads) against a fresh run of the
reference libraries on the committed files, so a stale fixture fails; and the
GGUF's tokenizer metadata against the sentencepiece model it was made from."""
import json
import os

import gguf
import pytest
import sentencepiece as spm
from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAINED = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "trained")


@pytest.fixture(scope="module")
def expected():
    with open(os.path.join(TRAINED, "expected.json"), encoding="utf-8") as f:
        return json.load(f)


def texts(expected):
    return [bytes.fromhex(c["hex"]).decode("utf-8", "replace") if "hex" in c else c["text"]
            for c in expected["cases"]]


def test_sentencepiece_ids_are_fresh(expected):
    sp = spm.SentencePieceProcessor(model_file=os.path.join(TRAINED, "spm_bpe.model"))
    e = expected["tokenizers"]["spm_bpe"]
    got = [sp.encode(t) for t in texts(expected)]
    assert got == e["ids_plain"]
    assert [sp.decode(ids) for ids in got] == e["decoded_skip"]
    assert len(got) >= 400


@pytest.mark.parametrize("name", ["hf_llama_legacy", "hf_llama_metaspace", "hf_bpe_fallback",
                                  "hf_bytelevel_llama3", "hf_bytelevel_qwen2"])
def test_hf_ids_are_fresh(expected, name):
    tok = Tokenizer.from_file(os.path.join(TRAINED, name + ".json"))
    e = expected["tokenizers"][name]
    ts = texts(expected)
    assert [tok.encode(t, add_special_tokens=False).ids for t in ts] == e["ids"]
    tok.encode_special_tokens = True
    plain = [tok.encode(t, add_special_tokens=False).ids for t in ts]
    assert plain == e["ids_plain"]
    assert [tok.decode(p, skip_special_tokens=False) for p in plain] == e["decoded"]


@pytest.mark.parametrize("file,prefix", [("spm_bpe.gguf", True), ("spm_bpe_noprefix.gguf", False)])
def test_gguf_holds_the_sentencepiece_vocab(file, prefix):
    sp = spm.SentencePieceProcessor(model_file=os.path.join(TRAINED, "spm_bpe.model"))
    r = gguf.GGUFReader(os.path.join(TRAINED, file))

    def field(key):
        f = r.fields[key]
        return [f.parts[i] for i in f.data]

    assert bytes(field("tokenizer.ggml.model")[0]).decode() == "llama"
    tokens = [bytes(p).decode("utf-8") for p in field("tokenizer.ggml.tokens")]
    assert tokens == [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    scores = [float(p[0]) for p in field("tokenizer.ggml.scores")]
    assert scores == pytest.approx([sp.get_score(i) for i in range(sp.get_piece_size())], abs=0)
    types = [int(p[0]) for p in field("tokenizer.ggml.token_type")]
    assert types.count(int(gguf.TokenType.BYTE)) == 256
    assert types[sp.unk_id()] == int(gguf.TokenType.UNKNOWN)
    assert types[sp.bos_id()] == int(gguf.TokenType.CONTROL)
    assert bool(field("tokenizer.ggml.add_space_prefix")[0][0]) is prefix
