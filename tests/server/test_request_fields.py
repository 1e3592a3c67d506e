"""Issue 17 item 5 on the real model: every request field is honoured or refused with a 400 that
names it. stop_token_ids, min_tokens, logit_bias and best_of change the output as vLLM defines
them; messages without content, tool calling and requests that can never be admitted are 400s;
unknown fields are ignored, counted in /metrics and logged once."""
import math

import pytest

from server_process import MAX_NUM_SEQS
from test_validation import assert_error

PROMPT = "The three primary colors are"
FORCED = 1000  # a token id that logit_bias +100 makes the greedy choice


def completion(server, **fields):
    body = dict({"model": server.model, "prompt": PROMPT, "temperature": 0}, **fields)
    return server.post("/v1/completions", body)


def ok(r):
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def forced_text(server):
    return server.post("/detokenize", {"tokens": [FORCED]}).json()["prompt"]


def test_logit_bias_forces_a_token_and_is_clamped(server, forced_text):
    free = ok(completion(server, max_tokens=3, ignore_eos=True))["choices"][0]["text"]
    assert free != forced_text * 3
    for bias in (100, 1e6):  # 1e6 is clamped to 100, not refused
        got = ok(completion(server, max_tokens=3, ignore_eos=True, logit_bias={str(FORCED): bias}))
        assert got["choices"][0]["text"] == forced_text * 3, bias
    got = ok(completion(server, max_tokens=3, ignore_eos=True, logit_bias={str(FORCED): -100}))
    assert got["choices"][0]["text"] == free, "a bias against a token the model never picks changes nothing"
    assert_error(completion(server, logit_bias={"49152": 1}), 400, param="logit_bias")
    assert_error(completion(server, logit_bias={"x": 1}), 400, param="logit_bias")
    assert_error(completion(server, logit_bias={str(i): 1 for i in range(301)}), 400, param="logit_bias")


def test_stop_token_ids_end_the_request(server):
    body = dict(max_tokens=5, ignore_eos=True, logit_bias={str(FORCED): 100})
    got = ok(completion(server, stop_token_ids=[FORCED], **body))
    assert got["choices"][0]["finish_reason"] == "stop"
    assert got["choices"][0]["text"] == "", "the end token's own text is dropped"
    assert got["usage"]["completion_tokens"] == 1
    assert_error(completion(server, stop_token_ids=[-1]), 400, param="stop_token_ids")
    assert_error(completion(server, stop_token_ids=[49152]), 400, param="stop_token_ids")


def test_min_tokens_masks_stop_token_ids_until_reached(server, forced_text):
    body = dict(max_tokens=8, ignore_eos=True, logit_bias={str(FORCED): 100}, stop_token_ids=[FORCED])
    got = ok(completion(server, min_tokens=3, **body))
    c = got["choices"][0]
    assert c["finish_reason"] == "stop"
    assert got["usage"]["completion_tokens"] == 4, "three other tokens, then the forced stop token"
    assert forced_text not in c["text"]


def test_min_tokens_masks_eos(server, client):
    msgs = [{"role": "user", "content": "Say hi."}]
    free = client.chat.completions.create(model=server.model, messages=msgs, max_tokens=40, temperature=0)
    assert free.choices[0].finish_reason == "stop", "the free answer ends on eos"
    n = free.usage.completion_tokens
    longer = client.chat.completions.create(model=server.model, messages=msgs, max_tokens=n + 12, temperature=0,
                                            extra_body={"min_tokens": n + 4})
    assert longer.usage.completion_tokens >= n + 4
    assert longer.choices[0].message.content.startswith(free.choices[0].message.content)


def test_min_tokens_above_max_tokens_is_400(server):
    assert_error(completion(server, min_tokens=5, max_tokens=4), 400, param="min_tokens")
    # Without max_tokens it is checked against what the context leaves.
    assert_error(completion(server, min_tokens=100000), 400, param="min_tokens")


def test_best_of_returns_the_most_likely_candidates(server):
    """Candidate i of a seeded request samples with seed + i, so the n = 4 choices are the best_of = 4
    candidates; best_of must return the ones with the highest cumulative logprob, in that order."""
    body = dict(temperature=1.0, seed=11, max_tokens=6, ignore_eos=True, logprobs=0)
    all4 = ok(completion(server, n=4, **body))["choices"]
    scores = [math.fsum(c["logprobs"]["token_logprobs"]) for c in all4]
    ranked = sorted(range(4), key=lambda i: -scores[i])
    assert len({c["text"] for c in all4}) > 1, "the candidates should differ"
    one = ok(completion(server, n=1, best_of=4, **body))
    assert [c["text"] for c in one["choices"]] == [all4[ranked[0]]["text"]]
    assert one["usage"]["completion_tokens"] == 24, "every candidate's tokens are counted"
    two = ok(completion(server, n=2, best_of=4, **body))
    assert [c["index"] for c in two["choices"]] == [0, 1]
    assert [c["text"] for c in two["choices"]] == [all4[i]["text"] for i in ranked[:2]]
    # Without logprobs asked for, none come back, but the choice is the same.
    plain = ok(completion(server, n=1, best_of=4, **dict(body, logprobs=None)))
    assert plain["choices"][0]["text"] == all4[ranked[0]]["text"]
    assert plain["choices"][0]["logprobs"] is None


def test_best_of_limits(server):
    assert_error(completion(server, n=2, best_of=1), 400, param="best_of")
    assert_error(completion(server, best_of=MAX_NUM_SEQS + 1), 400, param="best_of")
    assert_error(completion(server, best_of=2, stream=True), 400, param="best_of")


@pytest.mark.parametrize("messages,param", [
    ([{"role": "user"}], "messages[0].content"),
    ([{"role": "user", "content": None}], "messages[0].content"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant"}], "messages[1].content"),
    ([{"role": "assistant", "content": None, "tool_calls": [{"id": "a", "type": "function"}]}],
     "messages[0].tool_calls[0]"),
    ([{"role": "wizard", "content": "hi"}], "messages[0].role"),
])
def test_messages_need_content_and_a_known_role(server, messages, param):
    r = server.post("/v1/chat/completions", {"model": server.model, "messages": messages, "max_tokens": 1})
    assert_error(r, 400, param=param)


@pytest.mark.parametrize("field,value", [
    ("tools", [{"type": "function", "function": {"name": "f", "parameters": {}}}]),
    ("tool_choice", "auto"), ("functions", [{"name": "f"}]), ("function_call", "auto"),
    ("parallel_tool_calls", True),
])
def test_tool_fields_are_refused_by_name_on_completions(server, field, value):
    # Chat reads them (tests/server/test_tool_calls.py); completions have no tools.
    r = server.post("/v1/completions", {"model": server.model, "max_tokens": 1, field: value, "prompt": "hi"})
    err = assert_error(r, 400, param=field)
    assert "not supported" in err["message"]


def test_tool_fields_that_ask_for_nothing_are_accepted(server):
    r = server.post("/v1/chat/completions", {"model": server.model, "max_tokens": 1, "tools": [],
                                             "tool_choice": "none", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200, r.text


def test_unknown_fields_are_ignored_counted_and_logged_once(server):
    name = "nanoserve_test_unknown_field"
    for i in range(2):
        got = ok(completion(server, max_tokens=1, **{name: {"any": i}}))
        assert got["choices"][0]["text"] is not None
    assert server.metric("nanoserve:request_unknown_fields_total", field=name) == 2
    log = server.log_text()
    assert log.count(f"'{name}'") == 1, log[-2000:]


def test_a_request_that_can_never_be_admitted_is_400_not_429(server):
    """Issue 17 item 6: 9 prompts x n 32 = 288 sequences, more than the waiting queue (256) can ever
    hold. A 429 would invite a retry that can never succeed."""
    r = server.post("/v1/completions", {"model": server.model, "prompt": ["a"] * 9, "n": MAX_NUM_SEQS,
                                        "max_tokens": 1})
    err = assert_error(r, 400, param="n")
    assert "waiting queue" in err["message"] and "288" in err["message"], err


def test_metrics_are_public_with_a_key(server):
    """Issue 17 item 4: as in vLLM, /metrics needs no key unless --metrics-require-key is given."""
    r = server.get("/metrics", headers={})
    assert r.status_code == 200
    assert "nanoserve:num_requests_running" in r.text
