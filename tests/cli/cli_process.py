"""Helpers for the CLI suites: run `nanoserve` to completion, or start
`nanoserve serve` and wait for /health (or for it to exit)."""
import os
import re
import subprocess
import time

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("NANOSERVE_BINARY") or os.path.join(ROOT, "build", "nanoserve")
FAMILIES = os.path.join(ROOT, "tests", "fixtures", "families")
QWEN2_GGUF = os.path.join(FAMILIES, "qwen2", "model.gguf")  # context length 256
QWEN2_HF = os.path.join(FAMILIES, "qwen2", "hf")
# Small limits, so that a server of a fixture model starts in milliseconds.
SMALL = ["--threads", "1", "--kv-cache-memory", "16M"]


def run(*args, timeout=60, env=None):
    assert os.path.exists(BINARY), "build nanoserve first (scripts/build)"
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})


class Serve:
    """`nanoserve serve ARGS`: started() is True once /health answers 200,
    False when the process exits first (then .rc, .stderr say why)."""

    def __init__(self, *args, env=None, timeout=60):
        assert os.path.exists(BINARY), "build nanoserve first (scripts/build)"
        self.proc = subprocess.Popen([BINARY, "serve", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=None if env is None else {**os.environ, **env})
        self.timeout = timeout
        self.url = None
        self.stdout_lines = []
        self.rc = None
        self.stderr = ""

    def _first_line(self):
        # A byte at a time from the pipe itself: readline() on the text wrapper may read the
        # lines after it into its own buffer, where stop()'s communicate() would never see them.
        out = b""
        fd = self.proc.stdout.fileno()
        while not out.endswith(b"\n"):
            b = os.read(fd, 1)
            if not b:
                break
            out += b
        return out.decode()

    def started(self):
        line = self._first_line()
        if line:
            self.stdout_lines.append(line)
        m = re.search(r"http://(\S+):(\d+)", line)
        if not m:
            return self._exited()
        host = m.group(1)
        if host in ("0.0.0.0", "[::]"):
            host = "127.0.0.1"
        self.url = f"http://{host}:{m.group(2)}"
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return self._exited()
            try:
                if requests.get(self.url + "/health", timeout=5).status_code == 200:
                    return True
            except requests.ConnectionError:
                pass
            time.sleep(0.05)
        raise AssertionError("server neither ready nor exited within the timeout")

    def _exited(self):
        try:
            self.proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError("no listening line and no exit")
        self.rc = self.proc.returncode
        self.stdout_lines += self.proc.stdout.readlines()
        self.stderr = self.proc.stderr.read()
        return False

    def stop(self):
        """Stops the server; returns its stdout and stderr (the rest of them)."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            out, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        self.stdout_lines.append(out)
        self.stderr += err
        return "".join(self.stdout_lines), self.stderr

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
