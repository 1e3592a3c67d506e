"""A burst of large request bodies against a live server, with small requests
sent beside it. Used by test_parse_budget.py; run directly to measure the
server's peak RSS (VmHWM) over a burst:

    .venv/bin/python tests/server/parse_burst.py [--large N] [-- SERVE FLAGS...]
"""
import argparse
import concurrent.futures
import json
import sys
import time

from server_process import Server

BODY_LIMIT = 4 << 20  # the server's max_body_bytes


def large_body(model, size=BODY_LIMIT):
    """A chat body of about `size` bytes, nearly all of it `{},` in an unknown field: the costliest
    shape for the JSON tree (docs/server.md). max_tokens 0 makes it a 400, found only after the
    whole body is parsed, so the engine never runs."""
    head = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0})
    head = head[:-1] + ', "pad": ['
    n = (size - len(head) - 2) // 3
    body = head + "{}," * (n - 1) + "{}]}"
    assert len(body) <= size
    return body.encode()


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM")


def burst(server, n_large, n_small, body=None):
    """Sends n_large large bodies and n_small small chat requests at once. Returns
    ([(status, json, Retry-After) for the large], [(status, json, seconds) for the small])."""
    body = body or large_body(server.model)
    headers = dict(server.headers(), **{"Content-Type": "application/json"})
    small = {"model": server.model, "messages": [{"role": "user", "content": "Say hi."}],
             "max_tokens": 2, "temperature": 0}

    def post_large(_):
        r = server.post("/v1/chat/completions", data=body, headers=headers, timeout=120)
        return r.status_code, r.json(), r.headers.get("Retry-After")

    def post_small(i):
        time.sleep(0.05 * i)  # spread over the burst
        t0 = time.monotonic()
        r = server.post("/v1/chat/completions", small, timeout=120)
        return r.status_code, r.json(), time.monotonic() - t0

    with concurrent.futures.ThreadPoolExecutor(n_large + n_small) as pool:
        large_f = [pool.submit(post_large, i) for i in range(n_large)]
        small_f = [pool.submit(post_small, i) for i in range(n_small)]
        return [f.result() for f in large_f], [f.result() for f in small_f]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--large", type=int, default=16)
    ap.add_argument("--small", type=int, default=8)
    ap.add_argument("serve_flags", nargs="*")
    args = ap.parse_args()
    server = Server(*args.serve_flags)
    try:
        before = vm_hwm_kib(server.proc.pid)
        body = large_body(server.model)
        t0 = time.monotonic()
        large, small = burst(server, args.large, args.small, body)
        wall = time.monotonic() - t0
        after = vm_hwm_kib(server.proc.pid)
        statuses = {}
        for status, _, _ in large:
            statuses[status] = statuses.get(status, 0) + 1
        print(f"flags {' '.join(args.serve_flags) or '(defaults)'}: {args.large} x {len(body)} B bodies, "
              f"{args.small} small; large statuses {statuses}, small statuses "
              f"{sorted(s for s, _, _ in small)}, slowest {max((t for _, _, t in small), default=0):.2f} s; "
              f"{wall:.1f} s")
        print(f"VmHWM before burst {before / 1024:.0f} MiB, after {after / 1024:.0f} MiB, "
              f"growth {(after - before) / 1024:.0f} MiB")
        assert server.proc.poll() is None, "server died"
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
