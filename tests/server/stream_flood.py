"""Opens N streaming completions at once, one raw connection each, against a fresh
`nanoserve serve` (default model), and counts the streams that end whole (200, [DONE],
the terminating chunk) within 300 s. Usage: stream_flood.py BINARY N"""
import json
import os
import re
import selectors
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
binary, n = sys.argv[1], int(sys.argv[2])
p = subprocess.Popen([binary, "serve", "--port", "0", "--max-model-len", "256", "--max-num-seqs", "32",
                      "--kv-cache-memory", str(256 << 20), "--max-waiting-requests", "4096"],
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
port = int(re.search(r":(\d+)", p.stdout.readline()).group(1))
while "ready" not in p.stdout.readline(): pass
body = json.dumps({"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0, "stream": True, "ignore_eos": True}).encode()
req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
sel = selectors.DefaultSelector(); bufs = {}
t0 = time.monotonic()
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port)); s.sendall(req); s.setblocking(False)
    sel.register(s, selectors.EVENT_READ); bufs[s] = b""
open_t = time.monotonic() - t0
ok = 0; done = 0
while bufs and time.monotonic() - t0 < 300:
    for key, _ in sel.select(timeout=1):
        s = key.fileobj
        d = s.recv(65536)
        if d: bufs[s] += d; continue
        raw = bufs.pop(s); sel.unregister(s); s.close(); done += 1
        if raw.startswith(b"HTTP/1.1 200") and raw.endswith(b"0\r\n\r\n") and b"data: [DONE]" in raw: ok += 1
wall = time.monotonic() - t0
print(f"{n} streams: {ok} complete and correct, {done} closed, opened in {open_t:.1f} s, all done in {wall:.1f} s")
p.terminate(); print("exit", p.wait(timeout=30))
