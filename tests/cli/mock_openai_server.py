"""A tiny OpenAI-compatible server with known timing, for `nanoserve bench serve`'s tests.

Every streamed request waits --ttft-ms, sends its first token, then one token
every --itl-ms until max_tokens (or max_completion_tokens), then a usage chunk
and `data: [DONE]`. The body goes out chunked, and the second token's event is
split over two writes, so the client must put SSE lines together. Chat streams
start with a role chunk whose content is empty, sent at once (it must not count
as the first token).

Faults, by arrival order (1-based, counted over the completions endpoints):
  --fail-every K    the Kth, 2Kth, ... request gets HTTP 500 with an OpenAI error body
  --break-every K   those streams are cut after two tokens (no final chunk, no [DONE])
  --hang-every K    those requests get no answer at all (the client must time out)
  --error-every K   those streams send an `error` event after one token
  --silent-every K  those streams' tokens carry no text (ids that decode to nothing): no token
                    chunk at all, only the final chunk (empty text) and the usage; with
                    --no-usage too, nothing counts them
GET /stats returns what each request asked for. The first stdout line is
`mock: listening on http://127.0.0.1:PORT`.
"""
import argparse
import json
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

MODEL = "mock-model"


class Server(socketserver.ThreadingMixIn, HTTPServer):
    daemon_threads = True
    request_queue_size = 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ttft-ms", type=float, default=100)
    ap.add_argument("--itl-ms", type=float, default=20)
    ap.add_argument("--fail-every", type=int, default=0)
    ap.add_argument("--break-every", type=int, default=0)
    ap.add_argument("--hang-every", type=int, default=0)
    ap.add_argument("--error-every", type=int, default=0)
    ap.add_argument("--silent-every", type=int, default=0)
    ap.add_argument("--no-usage", action="store_true")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--loading-s", type=float, default=0,
                    help="answer 503 'still loading' (as nanoserve does) for this long after start")
    args = ap.parse_args()
    ready_at = time.monotonic() + args.loading_s
    lock = threading.Lock()
    seen = []  # one dict per completions request, in arrival order
    vocab = {}

    def hits(k, n):
        return k > 0 and n % k == 0

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reply_json(self, status, obj):
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def chunk(self, data):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def event(self, obj, split=False):
            data = ("data: " + json.dumps(obj) + "\n\n").encode()
            if split:
                self.chunk(data[:7])
                time.sleep(0.002)
                self.chunk(data[7:])
            else:
                self.chunk(data)

        def loading(self):
            if time.monotonic() >= ready_at:
                return False
            self.reply_json(503, {"error": {"message": "The model is still loading.",
                                            "type": "service_unavailable"}})
            return True

        def do_GET(self):
            if self.path == "/health":
                if not self.loading():
                    self.reply_json(200, {"status": "ok"})
            elif self.path == "/v1/models":
                self.reply_json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
            elif self.path == "/stats":
                with lock:
                    self.reply_json(200, {"requests": list(seen)})
            else:
                self.reply_json(404, {"error": {"message": "not found"}})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if args.api_key and self.headers.get("Authorization") != "Bearer " + args.api_key:
                return self.reply_json(401, {"error": {"message": "bad key", "type": "auth"}})
            if self.path in ("/tokenize", "/v1/completions", "/v1/chat/completions") and self.loading():
                return
            if self.path == "/tokenize":
                words = body.get("prompt", "").split()
                with lock:
                    ids = [vocab.setdefault(w, len(vocab) + 1) for w in words]
                return self.reply_json(200, {"tokens": ids, "count": len(ids)})
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                return self.reply_json(404, {"error": {"message": "not found"}})
            chat = self.path == "/v1/chat/completions"
            if chat:
                prompt = body["messages"][0]["content"]
                max_tokens = body.get("max_completion_tokens", body.get("max_tokens", 16))
            else:
                prompt = body["prompt"]
                max_tokens = body.get("max_tokens", 16)
            prompt_len = len(prompt) if isinstance(prompt, list) else len(prompt.split())
            with lock:
                seen.append({"endpoint": self.path, "model": body.get("model"), "prompt_len": prompt_len,
                             "prompt_is_ids": isinstance(prompt, list), "max_tokens": max_tokens,
                             "ignore_eos": body.get("ignore_eos", False), "stream": body.get("stream"),
                             "include_usage": body.get("stream_options", {}).get("include_usage", False),
                             "temperature": body.get("temperature")})
                n = len(seen)
            if hits(args.hang_every, n):
                time.sleep(3600)
            if hits(args.fail_every, n):
                return self.reply_json(500, {"error": {"message": f"injected failure {n}", "type": "server_error"}})
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            kind = "chat.completion.chunk" if chat else "text_completion"
            if chat:
                self.event({"object": kind, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
            time.sleep(args.ttft_ms / 1e3)
            silent = hits(args.silent_every, n)
            for i in range(max_tokens):
                if i > 0:
                    time.sleep(args.itl_ms / 1e3)
                if silent and i < max_tokens - 1:
                    continue
                text = "" if silent else f" t{i}"
                choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
                choice["finish_reason"] = "length" if i == max_tokens - 1 else None
                self.event({"object": kind, "choices": [choice]}, split=(i == 1))
                if hits(args.break_every, n) and i == 1:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if hits(args.error_every, n) and i == 0:
                    self.event({"error": {"message": f"injected error event {n}", "type": "server_error"}})
                    self.chunk(b"")
                    return
            if not (silent and args.no_usage):
                self.event({"object": kind, "choices": [],
                            "usage": {"prompt_tokens": prompt_len, "completion_tokens": max_tokens,
                                      "total_tokens": prompt_len + max_tokens}})
            self.chunk(b"data: [DONE]\n\n")
            self.chunk(b"")

    server = Server(("127.0.0.1", 0), Handler)
    print(f"mock: listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
