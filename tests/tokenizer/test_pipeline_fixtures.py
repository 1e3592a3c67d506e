"""The pipeline fixtures (tests/fixtures/tokenizer/pipelines/, which
pipeline_parity_test.cc reads) against a fresh run of the `tokenizers`
library on the committed files, so that a stale or hand-edited fixture fails;
and their coverage: at least 200 random pipelines, every supported component
type among them."""
import json
import os
import sys

import pytest
from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "tokenizer")
sys.path.insert(0, FIXTURES)

import make_pipeline_fixtures as maker  # noqa: E402


def load(name):
    with open(os.path.join(FIXTURES, "pipelines", name), encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def vocabs():
    return load("vocabs.json")


@pytest.fixture(scope="module")
def texts():
    return [maker.case_text(c) for c in load("cases.json")]


def library(entry, vocabs):
    j = json.loads(json.dumps(entry["json"]))
    j["model"]["vocab"] = vocabs[entry["vocab"]]["vocab"]
    j["model"]["merges"] = vocabs[entry["vocab"]]["merges"]
    return Tokenizer.from_str(json.dumps(j))


def test_family_results_are_fresh(vocabs, texts):
    families = load("families.json")
    assert len(families) >= 20
    for name, e in families.items():
        res = maker.run(library(e, vocabs), texts)
        for check in ("ids", "ids_plain", "decoded", "decoded_skip", "with_bos"):
            assert res[check] == e[check], f"{name}: {check}"


def test_random_digests_are_fresh(vocabs, texts):
    pipelines = load("random.json")["pipelines"]
    assert len(pipelines) >= 200
    for i, e in enumerate(pipelines):
        res = maker.run(library(e, vocabs), texts)
        assert maker.digest(res) == e["digest"], f"random[{i}]"
        assert res["with_bos"] == e["with_bos"], f"random[{i}]"


def types_in(j, acc):
    if isinstance(j, dict):
        if "type" in j and isinstance(j["type"], str):
            acc.add(j["type"])
        for v in j.values():
            types_in(v, acc)
    elif isinstance(j, list):
        for v in j:
            types_in(v, acc)
    return acc


def test_random_pipelines_cover_every_component():
    seen = {"normalizer": set(), "pre_tokenizer": set(), "decoder": set(), "post_processor": set()}
    for e in load("random.json")["pipelines"]:
        for key in seen:
            types_in(e["json"].get(key), seen[key])
    assert seen["normalizer"] >= {"Sequence", "NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Strip", "Prepend", "Replace",
                                  "BertNormalizer"}
    assert seen["pre_tokenizer"] >= {"Sequence", "Split", "ByteLevel", "Digits", "Metaspace", "Whitespace",
                                     "WhitespaceSplit", "Punctuation", "BertPreTokenizer", "CharDelimiterSplit"}
    assert seen["decoder"] >= {"Sequence", "ByteLevel", "ByteFallback", "Fuse", "Strip", "Replace", "Metaspace"}
    assert seen["post_processor"] >= {"Sequence", "TemplateProcessing", "ByteLevel", "RobertaProcessing"}
