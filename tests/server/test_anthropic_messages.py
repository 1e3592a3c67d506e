"""POST /v1/messages through the official `anthropic` client: text replies,
stop reasons, streaming events, tool use (forced, so deterministic on the
default model) with tool_result history, x-api-key, and errors in Anthropic's
shape."""
import json

import anthropic
import jsonschema
import pytest
import requests

from server_process import Server

WEATHER = {"name": "get_weather", "description": "Weather of a city",
           "input_schema": {"type": "object", "properties": {
               "city": {"type": "string", "maxLength": 20}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
               "required": ["city", "days"]}}
ASK = [{"role": "user", "content": "What is the weather in Paris for 3 days?"}]


@pytest.fixture(scope="module")
def ms():
    s = Server("--max-model-len", "2048")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def ac(ms):
    # The client sends the key as x-api-key.
    return anthropic.Anthropic(base_url=ms.url, api_key=ms.api_key, max_retries=0)


def test_text_reply_and_stop_reasons(ac, ms):
    r = ac.messages.create(model=ms.model, max_tokens=8, system="Be brief.", messages=ASK, extra_body={"temperature": 0})
    assert r.type == "message" and r.role == "assistant" and r.id.startswith("msg_")
    assert r.stop_reason == "max_tokens" and r.usage.output_tokens == 8 and r.usage.input_tokens > 0
    assert r.content[0].type == "text" and r.content[0].text
    full = ac.messages.create(model=ms.model, max_tokens=200, messages=ASK, extra_body={"temperature": 0})
    assert full.stop_reason in ("end_turn", "max_tokens")
    # A stop sequence taken from the greedy text itself: it stops there and is named.
    words = r.content[0].text.split()
    stop = words[1] if len(words) > 1 else words[0]
    s = ac.messages.create(model=ms.model, max_tokens=8, messages=ASK, extra_body={"temperature": 0}, stop_sequences=[stop])
    assert s.stop_reason == "stop_sequence" and s.stop_sequence == stop
    assert stop not in s.content[0].text if s.content else True


def test_streaming_events_match_the_message(ac, ms):
    kw = dict(model=ms.model, max_tokens=12, messages=ASK, extra_body={"temperature": 0})
    whole = ac.messages.create(**kw)
    names = []
    with ac.messages.stream(**kw) as stream:
        for ev in stream:
            names.append(ev.type)
        final = stream.get_final_message()
    assert names[0] == "message_start" and names[-1] == "message_stop"
    assert "content_block_start" in names and "content_block_delta" in names and "message_delta" in names
    assert final.content[0].text == whole.content[0].text
    assert final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_forced_tool_use_is_valid(ac, ms, stream):
    kw = dict(model=ms.model, max_tokens=200, messages=ASK, tools=[WEATHER], extra_body={"temperature": 1},
              tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True})
    if stream:
        with ac.messages.stream(**kw) as s:
            for _ in s:
                pass
            msg = s.get_final_message()
    else:
        msg = ac.messages.create(**kw)
    assert msg.stop_reason == "tool_use"
    uses = [b for b in msg.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather" and uses[0].id
    jsonschema.validate(uses[0].input, WEATHER["input_schema"])


def test_tool_result_history_is_accepted(ac, ms):
    history = ASK + [
        {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"city": "Paris", "days": 3}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]}]
    r = ac.messages.create(model=ms.model, max_tokens=4, messages=history, tools=[WEATHER],
                           tool_choice={"type": "none"}, extra_body={"temperature": 0})
    assert r.content and r.content[0].type == "text"


def test_errors_have_anthropic_shape(ac, ms):
    with pytest.raises(anthropic.BadRequestError) as e:
        ac.messages.create(model=ms.model, max_tokens=4, messages=[{"role": "system", "content": "x"}])
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "invalid_request_error"
    assert "messages[0].role" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError):
        ac.messages.create(model="no-such-model", max_tokens=4, messages=ASK)
    bad_key = anthropic.Anthropic(base_url=ms.url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        bad_key.messages.create(model=ms.model, max_tokens=4, messages=ASK)
    assert e.value.body["type"] == "error"
    r = requests.post(ms.url + "/v1/messages", headers={"x-api-key": ms.api_key},
                      json={"model": ms.model, "messages": ASK})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("'max_tokens'")
