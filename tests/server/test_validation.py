"""Every validation rule of the server: the OpenAI error shape, the right
status, and the server still serving afterwards."""
import json

import pytest
import requests

from server_process import MAX_MODEL_LEN, Server

MSGS = [{"role": "user", "content": "hi"}]


def assert_error(r, status, param=None):
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str)
    if param is not None:
        assert err["param"] == param, err
    return err


def chat(server, **fields):
    return server.post("/v1/chat/completions", dict({"model": server.model, "messages": MSGS}, **fields))


def completion(server, **fields):
    return server.post("/v1/completions", dict({"model": server.model, "prompt": "hi"}, **fields))


@pytest.mark.parametrize("field,value", [
    ("max_tokens", "7"), ("max_tokens", 1.5), ("temperature", "hot"), ("top_p", [1]), ("n", True),
    ("stream", 1), ("stop", 5), ("stop", [1, 2]), ("seed", "x"), ("logprobs", 3), ("top_k", 1.5),
    ("messages", "hi"), ("messages", [{"content": "no role"}]), ("messages", [{"role": "user", "content": 5}]),
])
def test_wrong_types_are_400(server, field, value):
    assert_error(chat(server, **{field: value}), 400, param=None)


@pytest.mark.parametrize("field,value", [
    ("max_tokens", 0), ("max_tokens", -1), ("max_completion_tokens", 0), ("n", 0), ("temperature", -0.5),
    ("top_p", 0), ("top_p", 1.5), ("top_k", -2), ("min_p", 2), ("presence_penalty", 3),
    ("frequency_penalty", -3), ("repetition_penalty", 0), ("top_logprobs", 30),
])
def test_out_of_range_is_400(server, field, value):
    extra = {"logprobs": True} if field == "top_logprobs" else {}
    assert_error(chat(server, **{field: value}, **extra), 400, param=field)


def test_invalid_json_is_400(server):
    for body in ["{not json", "", "[1,2]", '{"messages": [}']:
        assert_error(server.post("/v1/chat/completions", data=body,
                                 headers=dict(server.headers(), **{"Content-Type": "application/json"})), 400)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999", "1e39"])
def test_non_finite_numbers_are_400(server, literal):
    body = '{"messages": [{"role": "user", "content": "hi"}], "temperature": %s}' % literal
    assert_error(server.post("/v1/chat/completions", data=body, headers=server.headers()), 400)


def test_unknown_model_is_404(server):
    err = assert_error(chat(server, model="gpt-4o"), 404, param="model")
    assert err["code"] == "model_not_found"


def test_empty_prompt_or_messages_is_400(server):
    assert_error(chat(server, messages=[]), 400, param="messages")
    assert_error(completion(server, prompt=""), 400, param="prompt")
    assert_error(completion(server, prompt=[]), 400, param="prompt")
    assert_error(completion(server, prompt=[[]]), 400, param="prompt")


def test_context_length(server):
    long_prompt = " hello" * (MAX_MODEL_LEN + 10)
    err = assert_error(completion(server, prompt=long_prompt), 400)
    assert f"This model's maximum context length is {MAX_MODEL_LEN} tokens" in err["message"]
    n = len(server.post("/tokenize", {"prompt": "hi"}).json()["tokens"])
    err = assert_error(completion(server, max_tokens=MAX_MODEL_LEN - n + 1), 400)
    assert f"This model's maximum context length is {MAX_MODEL_LEN} tokens" in err["message"]
    assert completion(server, max_tokens=1).status_code == 200
    assert_error(completion(server, prompt=[1] * (MAX_MODEL_LEN + 1)), 400)


def test_token_ids_outside_vocab_are_400(server):
    assert_error(completion(server, prompt=[10 ** 7]), 400, param="prompt")
    assert_error(completion(server, prompt=[-1]), 400, param="prompt")


def test_stop_limits(server):
    assert_error(chat(server, stop=[f"s{i}" for i in range(17)]), 400, param="stop")  # at most 16
    assert_error(chat(server, stop="x" * 257), 400, param="stop")  # at most 256 bytes each
    assert_error(chat(server, stop=[""]), 400, param="stop")
    assert chat(server, stop=[f"s{i}" for i in range(16)], max_tokens=1).status_code == 200


def test_stream_options_need_stream(server):
    assert_error(chat(server, stream_options={"include_usage": True}), 400, param="stream_options")


def test_body_over_4_mib_is_413(server):
    body = json.dumps({"model": server.model, "prompt": "a" * (4 << 20)})
    assert_error(server.post("/v1/completions", data=body, headers=server.headers()), 413)


def test_api_key(server):
    assert_error(server.post("/v1/chat/completions", {"messages": MSGS}, headers={}), 401)
    assert_error(server.post("/v1/chat/completions", {"messages": MSGS},
                             headers={"Authorization": "Bearer wrong-key"}), 401)
    assert_error(server.post("/v1/completions", {"prompt": "a"}, headers={"Authorization": "test-key"}), 401)
    assert_error(server.post("/tokenize", {"prompt": "a"}, headers={}), 401)
    assert_error(server.post("/detokenize", {"tokens": [1]}, headers={}), 401)
    # Every /v1 path needs the key, as in vLLM: the model list too.
    assert_error(server.get("/v1/models", headers={}), 401)
    assert_error(server.get(f"/v1/models/{server.model}", headers={}), 401)
    assert server.get("/v1/models").status_code == 200
    # Public: /health, /version, and /metrics unless --metrics-require-key (as in vLLM).
    assert server.get("/health", headers={}).status_code == 200
    assert server.get("/version", headers={}).status_code == 200
    assert server.get("/metrics", headers={}).status_code == 200


def test_unknown_route_is_404(server):
    assert_error(server.get("/v2/whatever"), 404)


def test_server_still_serves(server):
    r = completion(server, max_tokens=2)
    assert r.status_code == 200
    assert r.json()["choices"][0]["text"] is not None


def test_queue_full_is_429():
    # One sequence at a time and room for one waiting: a third concurrent request is refused.
    s = Server("--max-num-seqs", "1", "--max-waiting-requests", "1", api_key=None)
    try:
        body = {"model": s.model, "prompt": "Once upon a time", "max_tokens": 240, "ignore_eos": True,
                "temperature": 0, "stream": True}
        running = requests.post(s.url + "/v1/completions", json=body, stream=True, timeout=60)
        next(running.iter_lines())  # admitted and generating
        waiting = requests.post(s.url + "/v1/completions", json=body, stream=True, timeout=60)
        refused = requests.post(s.url + "/v1/completions", json=dict(body, stream=False), timeout=60)
        assert_error(refused, 429)
        running.close()
        waiting.close()
    finally:
        s.stop()
