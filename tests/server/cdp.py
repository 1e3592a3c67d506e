"""A headless Chromium (Debian's `chromium`) driven over the DevTools protocol:
just what the chat page test needs (navigate, evaluate, screenshot)."""
import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time

import requests
from websockets.sync.client import connect

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


class Browser:
    def __init__(self, width=1200, height=800):
        assert os.path.exists(CHROMIUM), "Debian's chromium is needed (scripts/setup installs it)"
        self.profile = tempfile.mkdtemp(prefix="nanoserve-chromium-")
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-dev-shm-usage", "--remote-debugging-port=0", f"--user-data-dir={self.profile}",
             f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + 60
        while not (os.path.exists(port_file) and open(port_file).read().count("\n") >= 1):
            assert self.proc.poll() is None, "chromium exited at start"
            assert time.monotonic() < deadline, "chromium did not open its DevTools port within 60 s"
            time.sleep(0.05)
        port = int(open(port_file).read().split()[0])
        pages = [t for t in requests.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
                 if t["type"] == "page"]
        self.ws = connect(pages[0]["webSocketDebuggerUrl"], max_size=64 << 20)
        self.ids = itertools.count(1)
        self.call("Page.enable")
        self.call("Runtime.enable")

    def call(self, method, **params):
        i = next(self.ids)
        self.ws.send(json.dumps({"id": i, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == i:
                assert "error" not in msg, f"{method}: {msg['error']}"
                return msg["result"]

    def eval(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        assert "exceptionDetails" not in r, r["exceptionDetails"]
        return r["result"].get("value")

    def wait_for(self, expression, timeout=60, what=None):
        deadline = time.monotonic() + timeout
        while True:
            v = self.eval(expression)
            if v:
                return v
            assert time.monotonic() < deadline, f"timed out waiting for {what or expression}"
            time.sleep(0.05)

    def navigate(self, url):
        self.call("Page.navigate", url=url)
        self.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete'")

    def screenshot(self, path):
        data = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        with open(path, "wb") as f:
            f.write(data)
        return data

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            shutil.rmtree(self.profile, ignore_errors=True)
