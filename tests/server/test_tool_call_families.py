"""Tool calls through each family's own chat template and format, on the tiny
random models of tests/fixtures/families (made by make_families.py): the
template names the format (Hermes for Qwen2.5, llama3_json for Llama-3.1,
mistral for Mistral; the Mistral fixture's template has no tool markup, so
it is named with --tool-call-parser), the forced call is decoded under the tool's schema with
that model's tokenizer, and the openai client reads it back, streamed and not.
The weights are random, so only the constrained path says anything here; a
random model spends many tokens on the whitespace JSON allows (up to 16 bytes
between tokens), hence max_tokens 400."""
import json
import os

import jsonschema
import openai
import pytest

from server_process import ROOT, Server

TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                                     "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"], "additionalProperties": False}}}

FAMILIES = [("qwen2", "qwen25_tools.jinja", "hermes"), ("llama3", "llama3.jinja", "llama3_json"),
            ("mistral", "mistral.jinja", "mistral")]


@pytest.mark.parametrize("family, template, fmt", FAMILIES)
def test_forced_call_in_the_family_format(family, template, fmt):
    model = os.path.join(ROOT, "tests/fixtures/families", family, "hf")
    s = Server("-m", model, "--chat-template", os.path.join(ROOT, "tests/fixtures/chat_templates", template),
               "--max-model-len", "2048", *(["--tool-call-parser", fmt] if fmt == "mistral" else []),
               switches=("--allow-long-max-model-len",))  # the tiny fixtures say 256 tokens
    try:
        oai = openai.OpenAI(base_url=s.url + "/v1", api_key=s.api_key, max_retries=0)
        kw = dict(model=s.model, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[TOOL],
                  tool_choice="required", parallel_tool_calls=False, temperature=1, seed=1, max_tokens=400)
        r = oai.chat.completions.create(**kw)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", c
        call = c.message.tool_calls[0]
        assert call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), TOOL["function"]["parameters"])
        if fmt == "mistral":
            assert len(call.id) == 9 and call.id.isalnum()
        args, content = "", ""
        for ch in oai.chat.completions.create(stream=True, **kw):
            if ch.choices:
                content += ch.choices[0].delta.content or ""
                for tc in ch.choices[0].delta.tool_calls or []:
                    args += tc.function.arguments or ""
        assert args == call.function.arguments and content == ""
        if fmt == "mistral":
            return  # this template renders no tool turns (it refuses a tool role, as under jinja2)
        # The call and its result go back through the family's template.
        history = kw["messages"] + [c.message.model_dump(exclude_none=True),
                                    {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
        r2 = oai.chat.completions.create(**dict(kw, messages=history, tool_choice="none", max_tokens=4))
        assert r2.choices[0].message.tool_calls is None
    finally:
        s.stop()
