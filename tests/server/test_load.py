"""A bounded load run: 200 streaming requests, 16 at a time, issued for at most 60 s.
Prints request throughput and TTFT percentiles; asserts only correctness
(every completed request equals its prompt's greedy output alone)."""
import concurrent.futures
import time

NUM_REQUESTS = 200
CONCURRENCY = 16
BUDGET_S = 60
MAX_TOKENS = 8
PROMPTS = ["Once upon a time", "The best way to learn is", "Water boils at", "My favourite food is",
           "The capital of Italy is", "In the morning I", "Cats and dogs", "The ocean is"]


def percentile(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def test_load_run(server, client, capsys):
    start = time.monotonic()  # the budget covers the reference runs too
    want = {}
    for p in PROMPTS:
        r = client.completions.create(model=server.model, prompt=p, max_tokens=MAX_TOKENS, temperature=0)
        want[p] = r.choices[0].text
    load_start = time.monotonic()

    def one(i):
        if time.monotonic() - start > BUDGET_S:
            return None  # over budget: not issued
        p = PROMPTS[i % len(PROMPTS)]
        t0 = time.monotonic()
        ttft = None
        text = ""
        stream = client.completions.create(model=server.model, prompt=p, max_tokens=MAX_TOKENS, temperature=0,
                                           stream=True)
        for chunk in stream:
            if ttft is None and chunk.choices and chunk.choices[0].text:
                ttft = time.monotonic() - t0
            text += chunk.choices[0].text if chunk.choices else ""
        return p, text, ttft, time.monotonic() - t0

    with concurrent.futures.ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
        results = [r for r in pool.map(one, range(NUM_REQUESTS)) if r is not None]
    wall = time.monotonic() - load_start
    assert results, "no request completed"
    for p, text, ttft, _ in results:
        assert text == want[p], p
    ttfts = [r[2] for r in results if r[2] is not None]
    with capsys.disabled():
        print(f"\nload: {len(results)}/{NUM_REQUESTS} requests at concurrency {CONCURRENCY}, max_tokens "
              f"{MAX_TOKENS}, in {wall:.1f} s: {len(results) / wall:.2f} req/s; TTFT p50 "
              f"{1000 * percentile(ttfts, 50):.0f} ms, p99 {1000 * percentile(ttfts, 99):.0f} ms")
