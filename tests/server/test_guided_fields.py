"""vLLM's structured-output fields and the schema keywords added for them, on
the real server with the default model:
- schema properties come out in the schema's order (reason-then-answer);
- `pattern` and `format` (date, date-time, time, email, uuid, ipv4): every
  finished value validates under Python jsonschema with format checking, and
  every pattern field fullmatches Python's re;
- guided_regex over a set of patterns of the documented subset: every finished
  output fullmatches Python's re (the oracle), greedy and sampled;
- guided_json, guided_choice, guided_json_object and structured_outputs
  {json, regex, choice, json_object} on chat and completions;
- what is refused, by name: guided_grammar, grammar backends, whitespace
  patterns, two fields asking at once, patterns outside the subset."""
import json
import re
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import requests

REASON_ANSWER = {
    "type": "object",
    "properties": {"reasoning": {"type": "string", "maxLength": 40}, "answer": {"type": "integer"}},
    "required": ["reasoning", "answer"],
    "additionalProperties": False,
}

FORMATS = {
    "type": "object",
    "properties": {
        "day": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "date-time"},
        "clock": {"type": "string", "format": "time"},
        "mail": {"type": "string", "format": "email"},
        "id": {"type": "string", "format": "uuid"},
        "ip": {"type": "string", "format": "ipv4"},
        "code": {"type": "string", "pattern": "^[A-Z]{3}-\\d{2,4}$"},
        "word": {"type": "string", "pattern": "(yes|no|maybe)!?"},
    },
    "required": ["day", "at", "clock", "mail", "id", "ip", "code", "word"],
    "additionalProperties": False,
}

# The regex subset, construct by construct (docs/structured_output.md, "Patterns").
PATTERNS = [
    r"\d{3}-\d{4}",
    r"[A-Z][a-z]{2,6}( [A-Z][a-z]{2,6})?",
    r"(cat|dog|bird)s?",
    r"^0x[0-9a-f]{2,8}$",
    r"[^aeiou\s]{4}",
    r"\w+@\w+\.(com|org)",
    r"(?:ab)+c?",
    r"\$\d+\.\d\d",
    r"(red|green|blue) (car|bike)",
    r"[-+]?\d{1,3}(,\d{3})*",
    r"é+t(e|é)",
    r"a.b.c",
]


def post(server, path, timeout=300, **body):
    body.setdefault("model", server.model)
    return requests.post(server.url + path, json=body, headers=server.headers(), timeout=timeout)


def chat(server, prompt, **kw):
    return post(server, "/v1/chat/completions", messages=[{"role": "user", "content": prompt}], **kw)


def finished_texts(responses):
    out = []
    for r in responses:
        assert r.status_code == 200, r.text
        for c in r.json()["choices"]:
            text = c["message"]["content"] if "message" in c else c["text"]
            out.append((text, c["finish_reason"]))
    return out


def test_schema_keys_keep_the_schemas_order(server):
    for field in ("response_format", "guided_json", "structured_outputs"):
        body = {
            "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": REASON_ANSWER}},
            "guided_json": REASON_ANSWER,
            "structured_outputs": {"json": REASON_ANSWER},
        }[field]
        r = chat(server, "What is 12 + 5? Think, then answer.", max_tokens=80, temperature=0, **{field: body})
        text, finish = finished_texts([r])[0]
        assert finish == "stop", text
        pairs = json.loads(text, object_pairs_hook=list)
        assert [k for k, _ in pairs] == ["reasoning", "answer"], (field, text)
        jsonschema.validate(json.loads(text), REASON_ANSWER)
    # A schema sent as JSON text (vLLM takes both) keeps its order too.
    r = chat(server, "12 + 5?", max_tokens=80, temperature=0,
             guided_json='{"type":"object","properties":{"z":{"type":"boolean"},"a":{"type":"boolean"}},'
                         '"required":["z","a"]}')
    text, _ = finished_texts([r])[0]
    assert [k for k, _ in json.loads(text, object_pairs_hook=list)] == ["z", "a"]


def test_formats_and_patterns_validate_under_jsonschema_and_re(server):
    """Each format and pattern as its own value (short, so the small model finishes), greedy and sampled;
    then all of them in one object, greedy."""
    # Draft 2020-12's checker: FormatChecker() would take draft 3's "time" (no zone) instead.
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    jobs = [(name, s) for name in FORMATS["properties"] for s in (0, 1, 2)]
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(chat, server, f"Give a {name}.", max_tokens=60, seed=s,
                               temperature=0 if s == 0 else 1.0, guided_json=FORMATS["properties"][name])
                   for name, s in jobs]
        results = [finished_texts([f.result()])[0] for f in futures]
    finished = 0
    for (name, seed), (text, finish) in zip(jobs, results):
        if finish != "stop":
            continue
        finished += 1
        value = json.loads(text)
        sub = FORMATS["properties"][name]
        jsonschema.validate(value, sub, format_checker=checker)
        if "format" in sub:  # checked, not skipped (the time formats need rfc3339-validator installed)
            assert sub["format"] in checker.checkers
        if "pattern" in sub:
            assert re.fullmatch(sub["pattern"].strip("^$"), value), (name, value)
    assert finished >= len(jobs) * 3 // 4, results
    whole = chat(server, "Make up a record.", max_tokens=215, temperature=0, guided_json=FORMATS)
    text, finish = finished_texts([whole])[0]
    if finish == "stop":
        jsonschema.validate(json.loads(text), FORMATS, format_checker=checker)


def test_guided_regex_outputs_fullmatch_python_re(server):
    jobs = [(p, s) for p in PATTERNS for s in (0, 1)]
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(post, server, "/v1/completions", prompt="Write an example:", max_tokens=40, seed=s,
                               temperature=0 if s == 0 else 1.0, guided_regex=p) for p, s in jobs]
        results = [finished_texts([f.result()])[0] for f in futures]
    stopped = 0
    for (pattern, seed), (text, finish) in zip(jobs, results):
        if finish == "stop":
            stopped += 1
            assert re.fullmatch(pattern, text), (pattern, seed, text)
        else:
            assert finish == "length", (pattern, text)
    assert stopped >= len(jobs) * 3 // 4, results


def test_guided_choice_and_structured_outputs_on_both_endpoints(server):
    choices = ["positive", "negative", "neutral"]
    r = chat(server, "Sentiment of 'I love it'?", max_tokens=10, temperature=0, guided_choice=choices)
    assert finished_texts([r])[0] == (finished_texts([r])[0][0], "stop") and finished_texts([r])[0][0] in choices
    r = post(server, "/v1/completions", prompt="Sentiment:", max_tokens=10, temperature=1.0, seed=3,
             structured_outputs={"choice": choices})
    assert finished_texts([r])[0][0] in choices
    r = post(server, "/v1/completions", prompt="A year:", max_tokens=10, temperature=0,
             structured_outputs={"regex": r"(19|20)\d\d"})
    text, finish = finished_texts([r])[0]
    assert finish == "stop" and re.fullmatch(r"(19|20)\d\d", text)
    for body in ({"structured_outputs": {"json_object": True}}, {"guided_json_object": True}):
        r = chat(server, "Give a JSON object.", max_tokens=60, temperature=0, **body)
        text, finish = finished_texts([r])[0]
        if finish == "stop":
            assert isinstance(json.loads(text), dict)
        else:
            assert text.startswith("{")
    r = post(server, "/v1/completions", prompt="Person:", max_tokens=80, temperature=0,
             structured_outputs={"json": REASON_ANSWER}, guided_decoding_backend="auto")
    text, finish = finished_texts([r])[0]
    assert finish == "stop"
    jsonschema.validate(json.loads(text), REASON_ANSWER)


def test_refusals_name_the_field(server):
    schema_rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": REASON_ANSWER}}
    cases = [
        ({"guided_grammar": "root ::= \"a\""}, "guided_grammar", "not supported"),
        ({"guided_whitespace_pattern": " *"}, "guided_whitespace_pattern", "not supported"),
        ({"guided_regex": "a+", "guided_decoding_backend": "xgrammar"}, "guided_decoding_backend", "auto"),
        ({"response_format": schema_rf, "guided_json": REASON_ANSWER}, "guided_json", "'response_format'"),
        ({"guided_regex": "a", "guided_choice": ["a"]}, "guided_choice", "'guided_regex'"),
        ({"guided_json": REASON_ANSWER, "structured_outputs": {"regex": "a"}}, "structured_outputs", "guided_json"),
        ({"structured_outputs": {"grammar": "x"}}, "structured_outputs.grammar", "not supported"),
        ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs", "only one"),
        ({"structured_outputs": {}}, "structured_outputs", "one of"),
        ({"structured_outputs": {"regexp": "a"}}, "structured_outputs.regexp", "not a known field"),
        ({"guided_regex": "(?=a)b"}, "guided_regex", "lookaround"),
        ({"guided_regex": "(a)\\1"}, "guided_regex", "\\1"),
        ({"guided_choice": []}, "guided_choice", "list"),
        ({"guided_json": 5}, "guided_json", "JSON schema"),
        ({"guided_json": {"type": "string", "format": "hostname"}}, "guided_json", "unsupported format 'hostname'"),
        ({"guided_json": {"type": "string", "pattern": "a\\bb"}}, "guided_json", "'pattern' at #"),
        ({"guided_regex": "a+", "ignore_eos": True}, "ignore_eos", "guided_regex"),
    ]
    for body, param, words in cases:
        r = post(server, "/v1/completions", prompt="x", max_tokens=4, **body)
        assert r.status_code == 400, (body, r.text)
        err = r.json()["error"]
        assert err["param"] == param and words in err["message"], (body, err)
    # Nothing of these is counted as an unknown field.
    r = post(server, "/v1/completions", prompt="x", max_tokens=2, guided_regex="ab", guided_decoding_backend="auto")
    assert r.status_code == 200 and r.json()["choices"][0]["text"] in ("ab", "a", "")
