"""Operations, against a real `nanoserve serve` on the default model: the
start-up log, the request log line, the periodic statistics line, the JSON log
format and the flags that silence them; vLLM's metric names (every metric the
queries of vLLM's Grafana dashboard read, from tests/fixtures/server/
vllm_dashboard.json, parsed as PromQL) with sane values; /version and
/v1/models/{id}; CORS as vLLM answers it."""
import json
import os
import re
import subprocess
import time

import promql_parser
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from server_process import BINARY, MAX_MODEL_LEN, MAX_NUM_SEQS, ROOT, Server

DASHBOARD = os.path.join(ROOT, "tests", "fixtures", "server", "vllm_dashboard.json")
STATS_INTERVAL_S = 0.5


def start(*args, switches=(), **kw):
    """A server whose periodic line comes every STATS_INTERVAL_S (vLLM's VLLM_LOG_STATS_INTERVAL)."""
    old = os.environ.get("VLLM_LOG_STATS_INTERVAL")
    os.environ["VLLM_LOG_STATS_INTERVAL"] = str(STATS_INTERVAL_S)
    try:
        return Server(*args, switches=switches, **kw)
    finally:
        if old is None:
            del os.environ["VLLM_LOG_STATS_INTERVAL"]
        else:
            os.environ["VLLM_LOG_STATS_INTERVAL"] = old


def log_of(server):
    server.log.flush()
    with open(server.log_path) as f:
        return f.read()


def json_lines(server):
    lines = [line for line in log_of(server).splitlines() if line.strip()]
    out = []
    for line in lines:
        obj = json.loads(line)  # every line is one JSON object
        assert isinstance(obj, dict) and {"time", "level", "msg"} <= set(obj), line
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", obj["time"]), line
        out.append(obj)
    return out


@pytest.fixture(scope="module")
def jserver():
    s = start("--log-format", "json", "--threads", "2")
    yield s
    s.stop()


def complete(server, **body):
    r = server.post("/v1/completions", {"model": server.model, "prompt": "The capital of France is",
                                        "max_tokens": 4, **body})
    assert r.status_code == 200, r.text
    return r.json()


def test_start_up_log_states_the_engine_and_its_numbers_agree(jserver):
    lines = json_lines(jserver)
    engine = [l for l in lines if l["msg"] == "engine"]
    assert len(engine) == 1, lines
    e = engine[0]
    assert e["device"] == "cpu" and e["dtype"] == "float32" and e["kv_cache_dtype"] == "f32", e
    assert e["threads"] == 2 and e["max_num_seqs"] == MAX_NUM_SEQS, e
    assert e["max_num_batched_tokens"] >= 1 and e["block_size"] >= 1, e
    assert e["kv_cache_tokens"] == e["kv_cache_blocks"] * e["block_size"], e
    # max_model_len as every other place reports it.
    models = jserver.get("/v1/models").json()["data"][0]
    assert e["max_model_len"] == MAX_MODEL_LEN == models["max_model_len"], (e, models)
    tok = jserver.post("/tokenize", {"prompt": "a"}).json()
    assert tok["max_model_len"] == e["max_model_len"]
    kv = [l["msg"] for l in lines if l["msg"].startswith("KV cache:")]
    assert len(kv) == 1, lines
    m = re.fullmatch(r"KV cache: (\d+) blocks x (\d+) tokens = (\d+) tokens \([\d.]+ MiB\); up to ([\d.]+) "
                     r"sequences of max_model_len (\d+); prefix caching (on|off); "
                     r"(preemption recomputes \(no swap space\)|swap space \d+ blocks \([\d.]+ MiB\), preemption .*)",
                     kv[0])
    assert m, kv
    blocks, block_size, tokens, seqs, max_len = (float(x) for x in m.groups()[:5])
    assert (blocks, block_size, tokens, max_len) == (e["kv_cache_blocks"], e["block_size"], e["kv_cache_tokens"],
                                                     e["max_model_len"])
    assert abs(seqs - tokens / max_len) < 0.01, kv


def test_request_log_line_per_request(jserver):
    a = complete(jserver)
    b = jserver.post("/v1/chat/completions", {"model": jserver.model, "max_tokens": 3, "stream": True,
                                              "stream_options": {"include_usage": True},
                                              "messages": [{"role": "user", "content": "Hi"}]})
    assert b.status_code == 200
    chunks = [json.loads(l[6:]) for l in b.text.splitlines() if l.startswith("data: {")]
    b_id, b_usage = chunks[0]["id"], chunks[-1]["usage"]
    bad = jserver.post("/v1/completions", {"prompt": "x", "max_tokens": 0, "temperature": -1})
    assert bad.status_code == 400
    time.sleep(0.2)
    reqs = [l for l in json_lines(jserver) if l["msg"] == "request"]
    by_id = {l["id"]: l for l in reqs}
    for rid, usage, path in ((a["id"], a["usage"], "/v1/completions"), (b_id, b_usage, "/v1/chat/completions")):
        line = by_id[rid]
        assert line["status"] == 200 and line["method"] == "POST" and line["path"] == path, line
        assert line["prompt_tokens"] == usage["prompt_tokens"], (line, usage)
        assert line["output_tokens"] == usage["completion_tokens"], (line, usage)
        assert 0 <= line["ttft_s"] <= line["total_s"] < 60, line
    errors = [l for l in reqs if l["status"] == 400 and l["path"] == "/v1/completions"]
    assert len(errors) == 1 and errors[0]["id"] == "-" and "prompt_tokens" not in errors[0], reqs
    # Probes are not logged at info.
    jserver.get("/health")
    time.sleep(0.1)
    assert not [l for l in json_lines(jserver) if l["msg"] == "request" and l["path"] == "/health"]


def test_periodic_stats_line_while_busy_then_quiet(jserver):
    def stats():
        return [l for l in json_lines(jserver) if l["msg"] == "stats"]

    # Idle: no lines.
    time.sleep(3 * STATS_INTERVAL_S)
    before = len(stats())
    time.sleep(3 * STATS_INTERVAL_S)
    assert len(stats()) == before, "an idle server logs no statistics"
    # Busy for about four intervals.
    t_end = time.monotonic() + 4 * STATS_INTERVAL_S
    generated = 0
    while time.monotonic() < t_end:
        generated += complete(jserver, max_tokens=8, ignore_eos=True)["usage"]["completion_tokens"]
    time.sleep(2 * STATS_INTERVAL_S)
    new = stats()[before:]
    assert 2 <= len(new) <= 8, new
    for l in new:
        assert set(l) >= {"interval_s", "prompt_throughput", "generation_throughput", "running", "waiting", "kv_cache_usage_pct",
                          "prefix_cache_hit_rate_pct"}, l
        assert 0 <= l["kv_cache_usage_pct"] <= 100 and 0 <= l["prefix_cache_hit_rate_pct"] <= 100, l
        assert l["running"] >= 0 and l["waiting"] >= 0, l
    assert any(l["generation_throughput"] > 0 for l in new), new
    # The throughputs add up to what was generated (each line covers its interval, within the clock's slack).
    total = sum(l["generation_throughput"] * l["interval_s"] for l in new)
    assert abs(total - generated) <= 0.1 * len(new) + 0.01 * generated, (total, generated, new)
    assert all(l["interval_s"] >= STATS_INTERVAL_S for l in new), new
    # Idle again: quiet after the line that closes the busy stretch.
    count = len(stats())
    time.sleep(3 * STATS_INTERVAL_S)
    assert len(stats()) == count


def test_text_format_and_the_flags_that_silence_the_lines():
    s = start("--threads", "1", switches=("--disable-log-requests", "--disable-log-stats"))
    try:
        complete(s, max_tokens=8, ignore_eos=True)
        time.sleep(3 * STATS_INTERVAL_S)
        log = log_of(s)
    finally:
        s.stop()
    assert re.search(r"^\d{4}-\d\d-\d\dT[\d:.]+Z \[I\] engine device=cpu dtype=float32 ", log, re.M), log
    assert " [I] request " not in log and " [I] stats " not in log, log
    s = start("--threads", "1")
    try:
        r = complete(s, max_tokens=8, ignore_eos=True)
        time.sleep(3 * STATS_INTERVAL_S)
        log = log_of(s)
    finally:
        s.stop()
    assert re.search(rf"\[I\] request id={r['id']} method=POST path=/v1/completions status=200 "
                     rf"prompt_tokens=\d+ output_tokens=8 ttft_s=[\d.]+ total_s=[\d.]+$", log, re.M), log
    assert re.search(r"\[I\] stats interval_s=[\d.]+ prompt_throughput=[\d.]+ generation_throughput=[\d.]+ running=\d+ "
                     r"waiting=\d+ kv_cache_usage_pct=[\d.]+ prefix_cache_hit_rate_pct=[\d.]+$", log, re.M), log


def selectors(expr):
    """The metric names and label matchers an expression reads, from its PromQL syntax tree."""
    out = []

    def walk(node):
        if isinstance(node, promql_parser.VectorSelector):
            out.append((node.name, str(node.matchers)))
            return
        for attr in ("expr", "lhs", "rhs", "vector_selector", "param"):
            child = getattr(node, attr, None)
            if child is not None:
                walk(child)
        for arg in getattr(node, "args", None) or []:
            walk(arg)

    walk(promql_parser.parse(expr))
    return out


def test_dashboard_queries_read_only_served_metrics_with_sane_values():
    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    s = start("--metrics-prefix", "vllm", switches=("--served-model-name", "smol", "alias"))
    try:
        usages = [complete(s, max_tokens=n, ignore_eos=True)["usage"] for n in (1, 3, 5)]
        usages.append(s.post("/v1/chat/completions", {"model": "alias", "max_tokens": 2, "ignore_eos": True,
                                                      "messages": [{"role": "user", "content": "Hi"}]}).json()["usage"])
        text = s.get("/metrics").text
    finally:
        s.stop()
    n = len(usages)
    families = {f.name: f for f in text_string_to_metric_families(text)}  # the exposition format parses
    served = {}
    for fam in families.values():
        for sample in fam.samples:
            served.setdefault(sample.name, []).append(sample)
    # Every series is vLLM's, labelled with the first served name (the dashboard's $model_name).
    assert all(name.startswith("vllm:") for name in served), sorted(served)
    assert all(smp.labels.get("model_name") == "smol" for smps in served.values() for smp in smps)

    queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(queries) >= 25, queries
    names = set()
    for q in queries:
        for name, matchers in selectors(q.replace("$__rate_interval", "1m").replace("$model_name", "smol")):
            assert name.startswith("vllm:"), q
            assert 'model_name="smol"' in matchers, (q, matchers)
            names.add(name)
    missing = sorted(nm for nm in names if nm not in served)
    assert not missing, f"the dashboard reads metrics that are not served: {missing}"
    var = dashboard["templating"]["list"][1]["query"]["query"]
    assert re.fullmatch(r'label_values\(\{__name__=~"vllm:\.\*"\},model_name\)', var)

    def one(name):
        (smp,) = served[name]
        return smp.value

    prompt = sum(u["prompt_tokens"] for u in usages)
    generated = sum(u["completion_tokens"] for u in usages)
    assert generated == 1 + 3 + 5 + 2
    assert one("vllm:prompt_tokens_total") == prompt and one("vllm:generation_tokens_total") == generated
    assert sum(smp.value for smp in served["vllm:request_success_total"]) == n
    assert one("vllm:num_requests_running") == 0 and one("vllm:num_requests_waiting") == 0
    assert 0 <= one("vllm:gpu_cache_usage_perc") <= 1
    counts = {
        "vllm:e2e_request_latency_seconds": n, "vllm:time_to_first_token_seconds": n,
        "vllm:request_queue_time_seconds": n, "vllm:request_prefill_time_seconds": n,
        "vllm:request_decode_time_seconds": n, "vllm:request_inference_time_seconds": n,
        "vllm:request_prompt_tokens": n, "vllm:request_generation_tokens": n,
        "vllm:request_max_num_generation_tokens": n,
        # One observation per token after a sequence's first.
        "vllm:inter_token_latency_seconds": generated - n, "vllm:time_per_output_token_seconds": generated - n,
    }
    for hist, count in counts.items():
        assert families[hist].type == "histogram", hist
        buckets = [(smp.labels["le"], smp.value) for smp in served[hist + "_bucket"]]
        values = [v for _, v in buckets]
        assert values == sorted(values), (hist, buckets)  # cumulative: never decreasing
        assert buckets[-1][0] == "+Inf" and values[-1] == one(hist + "_count") == count, (hist, buckets, count)
        bounds = [float(le) for le, _ in buckets[:-1]]
        assert bounds == sorted(bounds) and len(set(bounds)) == len(bounds), hist
        assert one(hist + "_sum") >= 0, hist
    assert one("vllm:request_prompt_tokens_sum") == prompt
    assert one("vllm:request_generation_tokens_sum") == generated
    assert one("vllm:request_max_num_generation_tokens_sum") == generated  # n = 1: the one choice's tokens
    # The token buckets are vLLM's 1-2-5 series up to max_model_len.
    le = [float(smp.labels["le"]) for smp in served["vllm:request_prompt_tokens_bucket"][:-1]]
    assert le == [1, 2, 5, 10, 20, 50, 100, 200], le
    # Each interval lies within the request's whole time.
    assert one("vllm:request_queue_time_seconds_sum") + one("vllm:request_inference_time_seconds_sum") <= \
        one("vllm:e2e_request_latency_seconds_sum") + 1e-3
    assert abs(one("vllm:request_prefill_time_seconds_sum") + one("vllm:request_decode_time_seconds_sum")
               - one("vllm:request_inference_time_seconds_sum")) < 1e-3


def test_version_and_one_model(jserver):
    version = subprocess.run([BINARY, "--version"], capture_output=True, text=True, check=True).stdout.split()[-1]
    assert jserver.get("/version", headers={}).json() == {"version": version}
    m = jserver.get(f"/v1/models/{jserver.model}")
    assert m.status_code == 200 and m.json()["id"] == jserver.model and m.json()["object"] == "model"
    assert m.json() == jserver.get("/v1/models").json()["data"][0]
    assert m.json()["root"].endswith(".gguf"), m.json()  # what was loaded, as vLLM's root
    escaped = jserver.get("/v1/models/" + requests.utils.quote(jserver.model, safe=""))
    assert escaped.status_code == 200 and escaped.json()["id"] == jserver.model
    r = jserver.get("/v1/models/org/no-such-model")
    err = r.json()["error"]
    assert r.status_code == 404 and err["code"] == "model_not_found" and "'org/no-such-model'" in err["message"]
    # (requests escapes a bare '%': the id is "%zz"; a malformed escape is model_id_of_path's gtest.)
    r = jserver.get("/v1/models/%zz")
    assert r.status_code == 404 and "'%zz'" in r.json()["error"]["message"]
    assert jserver.post(f"/v1/models/{jserver.model}", {}).status_code == 405


def cors_view(headers):
    return {k.lower(): v for k, v in headers.items() if k.lower().startswith("access-control-") or k.lower() == "vary"}


OK_ORIGIN, OTHER_ORIGIN = "https://ok.example", "https://other.example"
# (method, path, request headers): preflights that pass and fail each check, ordinary requests with and
# without an Origin (on a route that needs the key too: the 401 gets the headers).
CORS_CASES = [
    ("OPTIONS", "/v1/chat/completions", {"Origin": OK_ORIGIN, "Access-Control-Request-Method": "POST",
                                         "Access-Control-Request-Headers": "authorization, content-type"}),
    ("OPTIONS", "/v1/completions", {"Origin": OK_ORIGIN, "Access-Control-Request-Method": "GET"}),
    ("OPTIONS", "/v1/completions", {"Origin": OK_ORIGIN, "Access-Control-Request-Method": "DELETE"}),
    ("OPTIONS", "/v1/completions", {"Origin": OTHER_ORIGIN, "Access-Control-Request-Method": "PUT",
                                    "Access-Control-Request-Headers": "x-other"}),
    ("OPTIONS", "/v1/completions", {"Origin": OK_ORIGIN, "Access-Control-Request-Method": "POST",
                                    "Access-Control-Request-Headers": "X-Trace,authorization"}),
    ("OPTIONS", "/v1/completions", {"Origin": OK_ORIGIN, "Access-Control-Request-Method": "GET",
                                    "Access-Control-Request-Private-Network": "true"}),
    ("OPTIONS", "/no/such/path", {"Origin": OK_ORIGIN, "Access-Control-Request-Method": "GET"}),
    ("GET", "/health", {"Origin": OK_ORIGIN}),
    ("GET", "/health", {"Origin": OTHER_ORIGIN, "Cookie": "s=1"}),
    ("GET", "/health", {}),
    ("GET", "/v1/models", {"Origin": OK_ORIGIN}),
]


def check_cors_against_starlette(server, options):
    """Every case answered by the server as Starlette's CORSMiddleware (vLLM's) answers it with the same
    options: the status and text of a preflight, and the CORS headers of every response."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    app = Starlette(routes=[Route("/{path:path}", lambda r: PlainTextResponse("x"), methods=["GET", "POST"])],
                    middleware=[Middleware(CORSMiddleware, **options)])
    oracle = TestClient(app)
    for method, path, headers in CORS_CASES:
        want = oracle.request(method, path, headers=headers)
        got = requests.request(method, server.url + path, headers=headers, timeout=10)
        assert cors_view(got.headers) == cors_view(want.headers), (method, path, headers, got.headers, want.headers)
        if method == "OPTIONS":
            assert (got.status_code, got.text) == (want.status_code, want.text), (headers, got.text, want.text)


def test_cors_with_vllms_defaults(jserver):
    # vLLM's defaults: every origin, method and header, no credentials.
    check_cors_against_starlette(jserver, dict(allow_origins=["*"], allow_methods=["*"], allow_headers=["*"],
                                               allow_credentials=False))
    r = requests.options(jserver.url + "/v1/chat/completions", headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"}, timeout=10)
    assert r.status_code == 200 and r.text == "OK"  # no key needed
    assert r.headers["Access-Control-Allow-Headers"] == "authorization, content-type"
    assert jserver.get("/v1/models", headers={"Origin": "https://a.example"}).headers[
        "Access-Control-Allow-Origin"] == "*"  # the 401 too
    # OPTIONS that is no preflight is an ordinary request: 405.
    assert requests.options(jserver.url + "/v1/models", headers={"Origin": "https://a.example"},
                            timeout=10).status_code == 405


@pytest.mark.parametrize("origins,credentials", [(["https://ok.example"], True), (["*"], True),
                                                 (["https://ok.example", "https://b.example"], False)])
def test_cors_as_configured(origins, credentials):
    methods, headers = ["GET", "POST"], ["Authorization", "X-Trace"]
    s = start("--allowed-origins", json.dumps(origins), "--allowed-methods", json.dumps(methods),
              "--allowed-headers", json.dumps(headers), switches=("--allow-credentials",) if credentials else ())
    try:
        check_cors_against_starlette(s, dict(allow_origins=origins, allow_methods=methods, allow_headers=headers,
                                             allow_credentials=credentials))
        stream = s.post("/v1/completions", {"prompt": "a", "max_tokens": 1, "stream": True},
                        headers={**s.headers(), "Origin": "https://ok.example"})
        assert stream.headers["Access-Control-Allow-Origin"] == "https://ok.example"
    finally:
        s.stop()


def test_cors_flags_are_checked():
    r = subprocess.run([BINARY, "serve", "--port", "0", "--allowed-origins", '["a", 1]'], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2 and "--allowed-origins" in r.stderr, r.stderr
