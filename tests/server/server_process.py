"""A `nanoserve serve` process with the default model on a free loopback port
(the server picks it: --port 0), for the HTTP server suites. NANOSERVE_BINARY
picks the binary (default build/nanoserve; CI also runs the suites against the
sanitized build-asan/nanoserve); NANOSERVE_SERVE_ARGS adds flags to every
server (scripts/gpu-check runs the suite with "--device cuda")."""
import os
import re
import subprocess
import time

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("NANOSERVE_BINARY") or os.path.join(ROOT, "build", "nanoserve")
LOG_DIR = os.path.dirname(BINARY)
API_KEY = "test-key"
MAX_MODEL_LEN = 256
MAX_NUM_SEQS = 32
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


class Server:
    def __init__(self, *extra_args, api_key=API_KEY, switches=()):
        assert os.path.exists(BINARY), "build nanoserve first (scripts/build)"
        self.log_path = os.path.join(LOG_DIR, f"serve-test-{os.getpid()}-{time.monotonic_ns()}.log")
        flags = {"--port": "0", "--max-model-len": str(MAX_MODEL_LEN), "--max-num-seqs": str(MAX_NUM_SEQS),
                 "--kv-cache-memory": str(256 << 20)}
        env_args = os.environ.get("NANOSERVE_SERVE_ARGS", "").split()
        flags.update(zip(env_args[::2], env_args[1::2]))
        flags.update(zip(extra_args[::2], extra_args[1::2]))  # extra_args: flag, value, ...
        args = [BINARY, "serve"] + [x for kv in flags.items() for x in kv]
        args += list(switches)  # options without a value (--enable-auto-tool-choice)
        if api_key:
            args += ["--api-key", api_key]
        self.api_key = api_key
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert m, f"no listening line from the server: {line!r}; log: {self.log_text()}"
        self.port = int(m.group(1))
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 120
        while True:
            assert self.proc.poll() is None, f"server exited: {self.log_text()}"
            try:
                if requests.get(self.url + "/health", timeout=5).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "server not ready within 120 s"
            time.sleep(0.1)
        self.model = requests.get(self.url + "/v1/models", headers=self.headers(), timeout=5).json()["data"][0]["id"]

    def log_text(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()[-4000:]

    def headers(self):
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def post(self, path, body=None, data=None, headers=None, timeout=60):
        h = self.headers() if headers is None else headers
        return requests.post(self.url + path, json=body, data=data, headers=h, timeout=timeout)

    def get(self, path, headers=None, timeout=30):
        h = self.headers() if headers is None else headers
        return requests.get(self.url + path, headers=h, timeout=timeout)

    def metrics(self):
        """{'series{labels}': value} from /metrics."""
        out = {}
        for line in self.get("/metrics").text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def metric(self, name, **labels):
        """The value of one series, matched on the labels given (model_name is implied)."""
        for series, value in self.metrics().items():
            base = series.split("{", 1)[0]
            if base != name:
                continue
            if all(f'{k}="{v}"' in series for k, v in labels.items()):
                return value
        raise KeyError(name)

    def client(self):
        import openai
        return openai.OpenAI(base_url=self.url + "/v1", api_key=self.api_key or "none", max_retries=0, timeout=120)

    def stop(self):
        """SIGTERM, then checks the exit: status 0 within 30 s and no sanitizer report in the log
        (a sanitized binary reports leaks and late errors only as it exits)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.flush()
        with open(self.log_path) as f:
            log = f.read()
        self.proc.stdout.close()
        self.log.close()
        os.unlink(self.log_path)
        reports = [m for m in SANITIZER_MARKS if m in log]
        assert not reports and self.proc.returncode == 0, \
            f"server exit {self.proc.returncode}, sanitizer reports {reports}; log: {log[-8000:]}"
