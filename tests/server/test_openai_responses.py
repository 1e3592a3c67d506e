"""POST /v1/responses (stateless) against the real server. The pinned `openai`
client (1.57.4) predates its typed Responses API, so non-streaming calls go
through the client's own request path (`client.post`) and streams are read as
SSE here; shapes follow OpenAI's documentation of the Responses API."""
import json

import jsonschema
import openai
import pytest
import requests

from server_process import Server

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather of a city",
           "parameters": {"type": "object", "properties": {
               "city": {"type": "string", "maxLength": 20}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
               "required": ["city", "days"], "additionalProperties": False}}


@pytest.fixture(scope="module")
def rsrv():
    s = Server("--max-model-len", "2048")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def oai(rsrv):
    return openai.OpenAI(base_url=rsrv.url + "/v1", api_key=rsrv.api_key, max_retries=0)


def create(oai, **body):
    return oai.post("/responses", body=body, cast_to=object)


def stream_events(rsrv, **body):
    r = requests.post(rsrv.url + "/v1/responses", json={**body, "stream": True}, headers=rsrv.headers(), stream=True)
    assert r.status_code == 200, r.text
    events = []
    name = None
    for line in r.iter_lines(decode_unicode=True):
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
            assert data["type"] == name
            events.append(data)
    return events


def test_text_response_and_stream_agree(oai, rsrv):
    body = dict(model=rsrv.model, input="Write a long story about a dragon.", instructions="Be detailed.", max_output_tokens=10,
                temperature=0)
    r = create(oai, **body)
    assert r["object"] == "response" and r["id"].startswith("resp_")
    assert r["status"] == "incomplete" and r["incomplete_details"]["reason"] == "max_output_tokens"
    msg = r["output"][0]
    assert msg["type"] == "message" and msg["role"] == "assistant"
    text = msg["content"][0]["text"]
    assert text and r["usage"]["output_tokens"] == 10
    events = stream_events(rsrv, **body)
    types = [e["type"] for e in events]
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.incomplete"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == text
    done = [e for e in events if e["type"] == "response.output_text.done"]
    assert done and done[0]["text"] == text
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == text


@pytest.mark.parametrize("stream", [False, True])
def test_function_call_items(oai, rsrv, stream):
    body = dict(model=rsrv.model, input=[{"role": "user", "content": "Weather in Paris for 3 days?"}],
                tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"}, parallel_tool_calls=False,
                max_output_tokens=200, temperature=1)
    if stream:
        events = stream_events(rsrv, **body)
        args = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
        final = events[-1]["response"]
        assert events[-1]["type"] == "response.completed"
        call = [o for o in final["output"] if o["type"] == "function_call"][0]
        assert call["arguments"] == args
    else:
        final = create(oai, **body)
        call = [o for o in final["output"] if o["type"] == "function_call"][0]
    assert call["name"] == "get_weather" and call["call_id"].startswith("call_")
    jsonschema.validate(json.loads(call["arguments"]), WEATHER["parameters"])
    # The call and its output go back as input items.
    follow = create(oai, model=rsrv.model, max_output_tokens=4, tools=[WEATHER], tool_choice="none",
                    input=body["input"] + [call, {"type": "function_call_output", "call_id": call["call_id"],
                                                  "output": "sunny"}])
    assert follow["output"][0]["type"] == "message"


def test_text_format_json_schema(oai, rsrv):
    schema = {"type": "object", "properties": {"colour": {"enum": ["red", "blue"]}}, "required": ["colour"],
              "additionalProperties": False}
    r = create(oai, model=rsrv.model, input="A colour as JSON.", max_output_tokens=40, temperature=0,
               text={"format": {"type": "json_schema", "name": "c", "schema": schema}})
    jsonschema.validate(json.loads(r["output"][0]["content"][0]["text"]), schema)


@pytest.mark.parametrize("field, value", [("store", True), ("previous_response_id", "resp_1"),
                                          ("input", 5), ("tools", [{"type": "web_search"}])])
def test_refused_by_name(rsrv, field, value):
    body = {"model": rsrv.model, "input": "hi", field: value}
    r = rsrv.post("/v1/responses", body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"].startswith(field), r.json()
