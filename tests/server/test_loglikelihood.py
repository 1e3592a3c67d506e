"""lm-eval's loglikelihood requests against the real server, checked against
transformers. The server serves the default model's Hugging Face folder
(build/fixtures/hf/smollm2-135m, f32: scripts/test makes it); the oracle is
tests/fixtures/loglikelihood/hf_logprobs.json, transformers' float32
log_softmax on that same folder (its script is beside it).

The requests are the ones lm-eval's openai-completions model sends for a
loglikelihood task: prompts as token ids (context ++ continuation, batched),
echo true, logprobs 1, temperature 0, max_tokens 1 (lm-eval) or 0 (score
only); the answer is read as lm-eval reads it: the sum of
token_logprobs[ctxlen:-1] (or [ctxlen:] with max_tokens 0), and is_greedy when
every continuation token's logprob is the max of its top_logprobs.

Tolerance: both sides compute in f32 over the same f32 weights, in different
summation orders (our fixed per-element order, torch's BLAS); on these short
sequences the logprobs agree to 1.8e-5 at worst (measured 2026-12-04 on the
2-core development machine, printed by the first test), so a per-token gap of
2e-4 is allowed: ten times that, for other SIMD paths. A position shifted by one, or a logprob off
by 0.05, is far outside it (the planted-error test shows the check failing)."""
import json
import os

import pytest
import requests

from server_process import ROOT, Server

FOLDER = os.path.join(ROOT, "build", "fixtures", "hf", "smollm2-135m")
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "loglikelihood", "hf_logprobs.json")
TOL = 2e-4

with open(FIXTURE) as f:
    ORACLE = json.load(f)
CASES = ORACLE["cases"]


@pytest.fixture(scope="module")
def hf_server():
    if not os.path.exists(os.path.join(FOLDER, "config.json")):
        pytest.fail(f"no HF folder at {FOLDER}: scripts/test makes it (tests/fixtures/hf/make_hf_folder.py)")
    # Small steps and few logits rows: prompts are scored over several chunks and steps.
    s = Server("-m", FOLDER, "--max-num-seqs", "4", "--max-num-batched-tokens", "16")
    yield s
    s.stop()


def lm_eval_request(server, cases, max_tokens=1):
    """One lm-eval loglikelihood batch: (sum of the continuation's logprobs, is_greedy, the choice) per case."""
    body = {"model": server.model, "prompt": [c["context_ids"] + c["continuation_ids"] for c in cases],
            "temperature": 0, "max_tokens": max_tokens, "logprobs": 1, "seed": 1234, "echo": True}
    r = requests.post(server.url + "/v1/completions", json=body, headers=server.headers(), timeout=300)
    assert r.status_code == 200, r.text
    out = []
    choices = sorted(r.json()["choices"], key=lambda c: c["index"])
    assert len(choices) == len(cases)
    for choice, case in zip(choices, cases):
        ctxlen = len(case["context_ids"])
        end = -1 if max_tokens else None
        lps = choice["logprobs"]["token_logprobs"][ctxlen:end]
        tops = choice["logprobs"]["top_logprobs"][ctxlen:end]
        is_greedy = all(lp == max(top.values()) for lp, top in zip(lps, tops))
        out.append((sum(lps), is_greedy, choice))
    return out


def mismatches(token_logprobs, oracle, shift=0):
    """Positions where the echoed prompt's logprobs (entry 0 is null) differ from transformers' by more than TOL."""
    bad = []
    for i, want in enumerate(oracle):
        j = i + 1 + shift
        got = token_logprobs[j] if 0 < j < len(token_logprobs) else None
        if got is None or abs(got - want) > TOL:
            bad.append((i + 1, got, want))
    return bad


def test_loglikelihood_batch_matches_transformers(hf_server):
    results = lm_eval_request(hf_server, CASES)
    worst = 0.0
    for (total, is_greedy, choice), case in zip(results, CASES):
        n = len(case["context_ids"]) + len(case["continuation_ids"])
        lp = choice["logprobs"]
        assert len(lp["token_logprobs"]) == n + 1  # the prompt's tokens, then the one generated
        assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        assert choice["text"].startswith(case["context"].rstrip())
        assert mismatches(lp["token_logprobs"][:n], case["token_logprobs"]) == [], case["context"]
        worst = max([worst] + [abs(a - b) for a, b in zip(lp["token_logprobs"][1:n], case["token_logprobs"])])
        ctx = len(case["context_ids"])
        want_total = sum(case["token_logprobs"][ctx - 1:])
        assert abs(total - want_total) <= TOL * len(case["continuation_ids"])
        margins = [a - b for a, b in zip(case["argmax_logprobs"][ctx - 1:], case["second_logprobs"][ctx - 1:])]
        if min(margins) > TOL:  # no near tie: greedy is decided
            want_greedy = case["argmax_ids"][ctx - 1:] == case["continuation_ids"]
            assert is_greedy == want_greedy, case["continuation"]
    print(f"largest |ours - transformers| over {len(CASES)} cases: {worst:.2e}")
    # Both a greedy and a non-greedy continuation are among the cases, so is_greedy is tested both ways.
    assert {g for _, g, _ in results} == {True, False}


def test_score_only_with_max_tokens_zero_equals_the_lm_eval_request(hf_server):
    scored = lm_eval_request(hf_server, CASES[:4], max_tokens=0)
    with_token = lm_eval_request(hf_server, CASES[:4], max_tokens=1)
    for (total0, greedy0, c0), (total1, greedy1, c1), case in zip(scored, with_token, CASES):
        assert c0["finish_reason"] == "length"
        n = len(case["context_ids"]) + len(case["continuation_ids"])
        assert len(c0["logprobs"]["token_logprobs"]) == n
        assert c0["logprobs"]["token_logprobs"] == c1["logprobs"]["token_logprobs"][:n]
        assert (total0, greedy0) == (total1, greedy1)


def test_a_prompts_logprobs_do_not_depend_on_its_batch(hf_server):
    """Alone, or batched with the other prompts (other chunks, other rows per step): the same floats."""
    batched = lm_eval_request(hf_server, CASES)
    for i in (0, 5):
        alone = lm_eval_request(hf_server, [CASES[i]])[0]
        assert alone[2]["logprobs"]["token_logprobs"] == batched[i][2]["logprobs"]["token_logprobs"]
        assert alone[2]["logprobs"]["top_logprobs"] == batched[i][2]["logprobs"]["top_logprobs"]


def test_planted_errors_fail_the_check(hf_server):
    """The comparison catches an off-by-one position and a small error in one value."""
    case = CASES[5]
    lp = lm_eval_request(hf_server, [case], max_tokens=0)[0][2]["logprobs"]["token_logprobs"]
    assert mismatches(lp, case["token_logprobs"]) == []
    assert len(mismatches(lp, case["token_logprobs"], shift=1)) >= len(case["token_logprobs"]) // 2
    planted = list(lp)
    planted[3] += 0.05
    assert [p for p, _, _ in mismatches(planted, case["token_logprobs"])] == [3]


def test_vllm_prompt_logprobs_shape_and_values(hf_server):
    case = CASES[3]
    ids = case["context_ids"] + case["continuation_ids"]
    body = {"model": hf_server.model, "prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 2}
    r = requests.post(hf_server.url + "/v1/completions", json=body, headers=hf_server.headers(), timeout=120)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["logprobs"] is None  # logprobs was not asked for
    pl = choice["prompt_logprobs"]
    assert len(pl) == len(ids) and pl[0] is None
    for i in range(1, len(ids)):
        entry = pl[i]
        mine = entry[str(ids[i])]
        assert abs(mine["logprob"] - case["token_logprobs"][i - 1]) <= TOL
        if case["argmax_logprobs"][i - 1] - case["second_logprobs"][i - 1] > TOL:  # no near tie
            assert (mine["rank"] == 1) == (ids[i] == case["argmax_ids"][i - 1])
        assert {1, 2} <= {v["rank"] for v in entry.values()} and len(entry) <= 3
        assert all(isinstance(v["decoded_token"], str) for v in entry.values())
        top1 = [v for v in entry.values() if v["rank"] == 1][0]
        assert abs(top1["logprob"] - case["argmax_logprobs"][i - 1]) <= TOL
