"""Tool calling through the official `openai` client against the real server
and the default model: tools reach the template, required and named calls are
decoded under the tool's schema (jsonschema is the oracle), streamed calls
arrive in OpenAI's delta shape with no markup in content, and every field is
honoured or refused by name. The validity run samples at temperature 1:
NANOSERVE_TOOL_CALLS (default 500) calls, half of them streamed."""
import json
import os
from concurrent.futures import ThreadPoolExecutor

import jinja2
import jsonschema
import openai
import pytest

from server_process import ROOT, Server

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city for some days",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 20},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "days"], "additionalProperties": False}}}
ADD = {"type": "function", "function": {
    "name": "add", "parameters": {"type": "object", "properties": {
        "a": {"type": "number", "minimum": -1000, "maximum": 1000}, "b": {"type": "number"}},
        "required": ["a", "b"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "maxLength": 30},
        "filters": {"type": "array", "items": {"type": "object", "properties": {
            "field": {"enum": ["title", "body"]}, "value": {"type": "string", "maxLength": 10}},
            "required": ["field", "value"], "additionalProperties": False}, "maxItems": 2},
        "exact": {"type": "boolean"}},
        "required": ["query"], "additionalProperties": False}}}
NOTE = {"type": "function", "function": {
    "name": "save_note", "parameters": {"type": "object", "properties": {
        "title": {"type": "string", "maxLength": 16}, "tags": {"type": "array", "items": {"type": "string", "maxLength": 8},
                                                               "maxItems": 3},
        "priority": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 3}, {"type": "null"}]}},
        "required": ["title", "priority"]}}}
TOOLS = [WEATHER, ADD, SEARCH, NOTE]
SCHEMA = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Paris for the next 3 days?"}]


@pytest.fixture(scope="module")
def tool_server():
    s = Server("--max-model-len", "2048", switches=["--enable-auto-tool-choice"])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def oai(tool_server):
    return openai.OpenAI(base_url=tool_server.url + "/v1", api_key=tool_server.api_key, max_retries=0)


def check_call(name, arguments):
    assert name in SCHEMA, name
    args = json.loads(arguments)
    jsonschema.validate(args, SCHEMA[name])
    return args


def collect_stream(stream):
    """(content, {index: {id, name, arguments}}, finish_reason) from a chat stream, checking the delta shape."""
    content, calls, finish = "", {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        d = ch.delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            if tc.index not in calls:
                # The first delta of a call carries its id, type and name.
                assert tc.id and tc.type == "function" and tc.function.name, tc
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
            else:
                assert tc.id is None and tc.function.name is None, tc
            calls[tc.index]["arguments"] += tc.function.arguments or ""
        finish = ch.finish_reason or finish
    assert sorted(calls) == list(range(len(calls)))
    return content, calls, finish


def test_required_call_non_streaming(oai, tool_server):
    r = oai.chat.completions.create(model=tool_server.model, messages=ASK, tools=TOOLS, tool_choice="required",
                                    parallel_tool_calls=False, temperature=0, max_tokens=200)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls"
    assert c.message.content is None
    assert len(c.message.tool_calls) == 1
    call = c.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_") and len(call.id) == 29
    check_call(call.function.name, call.function.arguments)


def test_named_call_and_stream_equals_non_stream(oai, tool_server):
    kw = dict(model=tool_server.model, messages=ASK, tools=TOOLS, parallel_tool_calls=False, temperature=0,
              max_tokens=200, tool_choice={"type": "function", "function": {"name": "add"}})
    r = oai.chat.completions.create(**kw)
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "add" and r.choices[0].finish_reason == "tool_calls"
    check_call("add", call.function.arguments)
    content, calls, finish = collect_stream(oai.chat.completions.create(stream=True, **kw))
    assert content == "" and finish == "tool_calls" and len(calls) == 1
    assert calls[0]["name"] == "add"
    assert calls[0]["arguments"] == call.function.arguments  # the fragments joined are the call


def test_parallel_calls_stream_with_indices(oai, tool_server):
    kw = dict(model=tool_server.model, messages=ASK, tools=TOOLS, tool_choice="required", temperature=1, seed=5,
              max_tokens=400)
    r = oai.chat.completions.create(**kw)
    msg = r.choices[0].message
    # The tiny model keeps calling until max_tokens; every call that completed is valid.
    assert msg.tool_calls and len(msg.tool_calls) >= 1
    for call in msg.tool_calls:
        check_call(call.function.name, call.function.arguments)
    assert len({call.id for call in msg.tool_calls}) == len(msg.tool_calls)
    content, calls, _ = collect_stream(oai.chat.completions.create(stream=True, **kw))
    assert "<tool_call" not in content and "tool_call>" not in content
    assert [c["name"] for c in calls.values()][:len(msg.tool_calls)] == [c.function.name for c in msg.tool_calls]


def test_auto_lets_the_model_answer_in_text(oai, tool_server):
    r = oai.chat.completions.create(model=tool_server.model, messages=[{"role": "user", "content": "Say hi."}],
                                    tools=TOOLS, temperature=0, max_tokens=20)
    c = r.choices[0]
    assert c.message.content and not c.message.tool_calls
    assert c.finish_reason in ("stop", "length")


def test_auto_needs_the_server_flag(server, client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=server.model, messages=ASK, tools=TOOLS, max_tokens=5)
    assert e.value.body["param"] == "tool_choice" and "--enable-auto-tool-choice" in e.value.body["message"]
    # required works without it
    r = client.chat.completions.create(model=server.model, messages=ASK, tools=[ADD], tool_choice="required",
                                       parallel_tool_calls=False, max_tokens=100, temperature=0)
    assert r.choices[0].finish_reason == "tool_calls"


def test_legacy_functions(oai, tool_server):
    r = oai.chat.completions.create(model=tool_server.model, messages=ASK,
                                    functions=[t["function"] for t in TOOLS], function_call={"name": "get_weather"},
                                    temperature=0, max_tokens=200)
    c = r.choices[0]
    assert c.finish_reason == "function_call" and c.message.function_call.name == "get_weather"
    check_call("get_weather", c.message.function_call.arguments)


def test_tool_round_trip_reaches_the_template(tool_server):
    """An assistant's tool_calls and the tool's answer are rendered by the template as jinja2
    renders them (arguments as an object, as vLLM passes them), tools included."""
    source = open(os.path.join(ROOT, "tests/fixtures/chat_templates/qwen25_tools.jinja")).read()
    args = '{"city": "Paris", "days": 3}'
    messages = [{"role": "system", "content": "Use tools."}, ASK[0],
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": args}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    r = tool_server.post("/tokenize", {"messages": messages, "tools": TOOLS, "chat_template": source,
                                       "add_special_tokens": False})
    assert r.status_code == 200, r.text
    ours = tool_server.post("/detokenize", {"tokens": r.json()["tokens"]}).json()["prompt"]
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    ref_messages = json.loads(json.dumps(messages))
    ref_messages[2]["tool_calls"][0]["function"]["arguments"] = json.loads(args)
    ref = env.from_string(source).render(messages=ref_messages, tools=TOOLS, add_generation_prompt=True)
    assert ours == ref
    assert '"name": "get_weather"' in ours and "sunny, 21 C" in ours


@pytest.mark.parametrize("body, param", [
    ({"tools": {"a": 1}}, "tools"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0].function.name"),
    ({"tools": [ADD], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [ADD], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [ADD], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"tools": [ADD], "tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"s": {"type": "integer", "multipleOf": 2}}}}}], "tool_choice": "required"},
     "tools"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": []}]}, "messages[0].tool_calls"),
    ({"messages": [{"role": "assistant", "content": None}]}, "messages[0].content"),
])
def test_bad_tool_fields_are_400_naming_them(tool_server, body, param):
    full = {"model": tool_server.model, "messages": ASK, "max_tokens": 5, **body}
    r = tool_server.post("/v1/chat/completions", full)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.json()


def test_completions_refuse_tools(tool_server):
    r = tool_server.post("/v1/completions", {"model": tool_server.model, "prompt": "x", "tools": [ADD]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools"


def one_call(oai, model, i):
    tools = TOOLS[i % len(TOOLS):] + TOOLS[:i % len(TOOLS)]
    choice = "required" if i % 3 else {"type": "function", "function": {"name": tools[0]["function"]["name"]}}
    kw = dict(model=model, messages=[{"role": "user", "content": f"Request {i}: use a tool."}], tools=tools,
              tool_choice=choice, parallel_tool_calls=False, temperature=1, seed=1000 + i, max_tokens=300)
    if i % 2:
        content, calls, finish = collect_stream(oai.chat.completions.create(stream=True, **kw))
        assert content == ""
        got = [(c["name"], c["arguments"]) for c in calls.values()]
    else:
        r = oai.chat.completions.create(**kw)
        finish = r.choices[0].finish_reason
        got = [(c.function.name, c.function.arguments) for c in r.choices[0].message.tool_calls or []]
    if finish != "tool_calls":
        return "cut"  # max_tokens ended it inside a long string
    assert len(got) == 1
    try:
        check_call(*got[0])
        return "valid"
    except (ValueError, jsonschema.ValidationError) as e:
        return f"invalid: {got[0]}: {e}"


def test_generated_calls_are_valid_against_their_schema(oai, tool_server):
    n = int(os.environ.get("NANOSERVE_TOOL_CALLS", "500"))
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda i: one_call(oai, tool_server.model, i), range(n)))
    valid = results.count("valid")
    cut = results.count("cut")
    invalid = [r for r in results if r.startswith("invalid")]
    print(f"\ntool-call validity: {valid} of {valid + len(invalid)} finished calls valid "
          f"({100.0 * valid / max(1, valid + len(invalid)):.1f}%), {cut} cut by max_tokens, {n} requests")
    assert not invalid, invalid[:3]
    assert valid >= 0.9 * n
