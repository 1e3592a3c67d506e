#!/usr/bin/env python3
"""Seconds from starting `nanoserve serve` to its first /health 200 (docs/engine.md, start-up).

usage: bench/startup_to_health.py BINARY [--runs N] -- [serve flags, e.g. --kv-cache-memory 4G]
Prints each run and the median. The server is started on a free port and killed after each run.
"""
import re
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request


def one_run(binary, flags):
    t0 = time.monotonic()
    proc = subprocess.Popen([binary, "serve", "--port", "0", *flags], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        port = None
        for line in proc.stdout:
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        if port is None:
            raise RuntimeError("the server printed no port")
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        return time.monotonic() - t0
            except urllib.error.HTTPError:
                pass  # 503 while loading
            except urllib.error.URLError:
                pass
            if proc.poll() is not None:
                raise RuntimeError("the server exited before /health answered 200")
            time.sleep(0.01)
    finally:
        proc.kill()
        proc.wait()


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__)
        return 2
    binary, rest = args[0], args[1:]
    runs = 3
    if rest[:1] == ["--runs"]:
        runs, rest = int(rest[1]), rest[2:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    times = [one_run(binary, rest) for _ in range(runs)]
    for t in times:
        print(f"{t:.3f} s")
    print(f"median {statistics.median(times):.3f} s over {runs} runs: {' '.join(rest)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
