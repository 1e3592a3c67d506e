"""echo, max_tokens 0, prompt_logprobs and the default max_tokens of
/v1/completions on the real server with the default model (the session
server). The values of the logprobs are checked against transformers in
test_loglikelihood.py; here the shapes, the texts, the defaults and the 400s."""
import json

import requests

from server_process import MAX_MODEL_LEN


def post(server, path, **body):
    body.setdefault("model", server.model)
    return requests.post(server.url + path, json=body, headers=server.headers(), timeout=120)


def tokenize(server, text):
    return post(server, "/tokenize", prompt=text).json()["tokens"]


def test_completions_default_to_16_tokens_chat_runs_to_the_context(server):
    r = post(server, "/v1/completions", prompt="Once upon a time", temperature=0, ignore_eos=True).json()
    assert r["usage"]["completion_tokens"] == 16 and r["choices"][0]["finish_reason"] == "length"
    msgs = [{"role": "user", "content": "Count these words: " + "word " * 150}]  # leaves ~80 tokens
    c = post(server, "/v1/chat/completions", messages=msgs, temperature=0, ignore_eos=True).json()
    assert c["usage"]["completion_tokens"] == MAX_MODEL_LEN - c["usage"]["prompt_tokens"]
    # A prompt that leaves fewer than 16 tokens: the default shrinks to what is left, as vLLM does.
    ids = tokenize(server, "word " * 400)[: MAX_MODEL_LEN - 5]
    assert len(ids) == MAX_MODEL_LEN - 5
    r = post(server, "/v1/completions", prompt=ids, temperature=0, ignore_eos=True)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 5


def test_echo_prepends_the_prompt(server, client):
    prompt = "The capital of France is"
    plain = client.completions.create(model=server.model, prompt=prompt, max_tokens=4, temperature=0)
    echoed = client.completions.create(model=server.model, prompt=prompt, max_tokens=4, temperature=0, echo=True)
    assert echoed.choices[0].text == prompt + plain.choices[0].text
    assert echoed.usage.completion_tokens == 4
    # Token-id prompts echo their decoded text.
    ids = tokenize(server, prompt)
    by_ids = client.completions.create(model=server.model, prompt=ids, max_tokens=4, temperature=0, echo=True)
    assert by_ids.choices[0].text == echoed.choices[0].text


def test_echo_with_logprobs_lists_the_prompt_tokens_first(server):
    prompt = "One two three four"
    ids = tokenize(server, prompt)
    r = post(server, "/v1/completions", prompt=prompt, max_tokens=3, temperature=0, echo=True, logprobs=2).json()
    lp = r["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(ids) + 3
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(isinstance(x, float) and x <= 0 for x in lp["token_logprobs"][1:])
    for top, tok, x in zip(lp["top_logprobs"][1:], lp["tokens"][1:], lp["token_logprobs"][1:]):
        assert tok in top and top[tok] == x and 2 <= len(top) <= 3
    # Offsets run through the echoed text and on into the output.
    text = r["choices"][0]["text"]
    assert lp["text_offset"][0] == 0
    assert all(text[o:].startswith(t) for o, t in zip(lp["text_offset"], lp["tokens"]))
    # The generated tokens' logprobs are those of the same request without echo.
    plain = post(server, "/v1/completions", prompt=prompt, max_tokens=3, temperature=0, logprobs=2).json()
    assert lp["token_logprobs"][len(ids):] == plain["choices"][0]["logprobs"]["token_logprobs"]


def test_max_tokens_zero_with_echo_scores_the_prompt_only(server):
    prompt = "Roses are red, violets are"
    r = post(server, "/v1/completions", prompt=[prompt, "Hello"], max_tokens=0, echo=True, logprobs=0).json()
    assert [c["text"] for c in r["choices"]] == [prompt, "Hello"]
    assert all(c["finish_reason"] == "length" for c in r["choices"])
    assert r["usage"]["completion_tokens"] == 0
    assert len(r["choices"][0]["logprobs"]["tokens"]) == len(tokenize(server, prompt))
    no_logprobs = post(server, "/v1/completions", prompt=prompt, max_tokens=0, echo=True).json()
    assert no_logprobs["choices"][0]["text"] == prompt and no_logprobs["choices"][0]["logprobs"] is None


def test_echo_streams_the_prompt_first(server):
    prompt = "A B C"
    r = requests.post(server.url + "/v1/completions", headers=server.headers(), stream=True, timeout=60,
                      json={"model": server.model, "prompt": prompt, "max_tokens": 3, "temperature": 0,
                            "echo": True, "stream": True})
    chunks = [json.loads(line[6:]) for line in r.iter_lines(decode_unicode=True)
              if line.startswith("data: ") and line != "data: [DONE]"]
    assert chunks[0]["choices"][0]["text"].startswith(prompt)
    whole = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    plain = post(server, "/v1/completions", prompt=prompt, max_tokens=3, temperature=0).json()
    assert whole == prompt + plain["choices"][0]["text"]


def test_chat_prompt_logprobs_sit_beside_the_choices(server):
    msgs = [{"role": "user", "content": "Hi"}]
    r = post(server, "/v1/chat/completions", messages=msgs, max_tokens=2, temperature=0, prompt_logprobs=1).json()
    n = r["usage"]["prompt_tokens"]
    pl = r["prompt_logprobs"]
    assert len(pl) == n and pl[0] is None
    assert all(1 <= len(e) <= 2 and any(v["rank"] == 1 for v in e.values()) for e in pl[1:])


def test_refusals_name_the_field(server):
    cases = [
        ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "x", "max_tokens": -1, "echo": True}, "max_tokens"),
        ({"prompt": "x", "prompt_logprobs": 21}, "prompt_logprobs"),
        ({"prompt": "x", "prompt_logprobs": 1, "stream": True}, "prompt_logprobs"),
        ({"prompt": "x", "echo": "yes"}, "echo"),
        ({"prompt": "x", "suffix": "y"}, "suffix"),
    ]
    for body, param in cases:
        r = post(server, "/v1/completions", **body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]["param"] == param, (body, r.text)
    r = post(server, "/v1/chat/completions", messages=[{"role": "user", "content": "x"}], max_tokens=0)
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
