"""The chat page at /, in a real browser (headless Chromium from Debian): it loads from the
binary, asks for the API key, streams a reply, renders markdown, keeps the conversation, and its
stop button aborts the request in the server (the abort counter in /metrics)."""
import json
import os
import time

import pytest
import requests

from cdp import Browser
from server_process import API_KEY, ROOT, Server

SCREENSHOT = os.path.join(ROOT, "build", "chat-page.png")
QUESTION = "Write a Python function that adds two numbers."


@pytest.fixture(scope="module")
def page_server():
    s = Server("--max-model-len", "1024")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser(page_server):
    b = Browser()
    b.navigate(page_server.url + "/")
    yield b
    b.close()


def set_field(b, id_, value):
    b.eval(f"""(() => {{ const e = document.getElementById({json.dumps(id_)}); e.value = {json.dumps(value)};
                 e.dispatchEvent(new Event('change')); }})()""")


def send(b, text):
    set_field(b, "input", text)
    b.eval("document.getElementById('send').click()")
    b.wait_for("document.getElementById('stop').disabled === false || "
               "document.getElementById('stats').textContent !== ''", what="the request to start")


def idle(b):
    return b.wait_for("document.getElementById('send').disabled === false && "
                      "document.getElementById('stop').disabled === true", what="the reply to end")


def last_reply(b):
    return b.eval("""(() => { const c = JSON.parse(localStorage.getItem('nanoserve.conversations'));
        const cur = JSON.parse(localStorage.getItem('nanoserve.current'));
        const m = c.find(x => x.id === cur).messages; return m[m.length - 1]; })()""")


def test_page_is_served_without_a_key_and_self_contained(page_server):
    r = requests.get(page_server.url + "/", timeout=10)  # no Authorization header
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/html")
    with open(os.path.join(ROOT, "web", "index.html"), "rb") as f:
        assert r.content == f.read()  # the page as committed, compiled into the binary
    assert "<script" in r.text and "src=\"http" not in r.text and "href=\"http" not in r.text
    assert requests.post(page_server.url + "/", timeout=10).status_code == 405


def test_chat_streams_a_reply(page_server, browser):
    b = browser
    # Without the key the server says 401 and the page asks for it; /v1/models
    # needs it too, so the model's name shows once the key is entered.
    send(b, "Hello")
    idle(b)
    assert "API key" in b.eval("document.getElementById('stats').textContent")
    assert b.eval("document.getElementById('model').textContent") == ""
    set_field(b, "api-key", API_KEY)
    assert b.wait_for("document.getElementById('model').textContent").startswith(page_server.model)
    set_field(b, "temperature", "0")
    set_field(b, "max-tokens", "96")
    set_field(b, "system", "You are a concise assistant.")
    send(b, QUESTION)
    idle(b)
    stats = b.eval("document.getElementById('stats').textContent")
    assert "tokens/s" in stats and stats.split()[0].isdigit() and int(stats.split()[0]) > 0, stats
    reply = last_reply(b)
    assert reply["role"] == "assistant" and reply["content"]
    # The page showed what the API gives for the same conversation and settings.
    api = page_server.post("/v1/chat/completions", {
        "messages": [{"role": "system", "content": "You are a concise assistant."},
                     {"role": "user", "content": QUESTION}],
        "temperature": 0, "top_p": 0.95, "max_tokens": 96}).json()
    assert reply["content"] == api["choices"][0]["message"]["content"]
    assert api["usage"]["completion_tokens"] == int(stats.split()[0])
    # Shown as markdown: the reply's code block is a <pre><code> on the page.
    assert "```" in reply["content"]
    assert b.eval("[...document.querySelectorAll('.msg.assistant .body')].pop().querySelector('pre code') "
                  "!== null")
    assert b.eval("[...document.querySelectorAll('.msg.assistant .body')].pop().innerHTML === "
                  "renderMarkdown(" + json.dumps(reply["content"]) + ")")
    png = b.screenshot(SCREENSHOT)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_markdown_and_code_blocks(browser):
    html = browser.eval(r"""renderMarkdown("# Title\nSome **bold**, *it*, `x<y`.\n\n```python\nif a < b:\n"""
                        r"""    print('&')\n```\n- one\n- two\n\n<img src=x onerror=alert(1)>")""")
    assert "<h1>Title</h1>" in html
    assert "<strong>bold</strong>" in html and "<em>it</em>" in html and "<code>x&lt;y</code>" in html
    assert "<pre><code class=\"language-python\">if a &lt; b:\n    print('&amp;')</code></pre>" in html
    assert "<ul><li>one</li><li>two</li></ul>" in html
    assert "<img" not in html and "&lt;img" in html  # model output never becomes markup


def test_stop_aborts_the_request_in_the_server(page_server, browser):
    b = browser
    before = page_server.metric("nanoserve:request_success_total", finished_reason="abort")
    b.eval("document.getElementById('new-chat').click()")
    assert b.eval("document.querySelectorAll('.msg').length") == 0
    set_field(b, "max-tokens", "800")
    set_field(b, "temperature", "0")
    send(b, "Count from 1 to 1000, one number per line.")
    b.wait_for("document.getElementById('stop').disabled === false && "
               "parseInt(document.getElementById('stats').textContent) >= 3", what="a few streamed tokens")
    b.eval("document.getElementById('stop').click()")
    idle(b)
    assert "stopped" in b.eval("document.getElementById('stats').textContent")
    shown = int(b.eval("parseInt(document.getElementById('stats').textContent)"))
    assert shown < 800
    deadline = time.monotonic() + 10
    while page_server.metric("nanoserve:request_success_total", finished_reason="abort") < before + 1:
        assert time.monotonic() < deadline, "the server did not count the abort"
        time.sleep(0.1)
    assert page_server.metric("nanoserve:request_success_total", finished_reason="abort") == before + 1


def test_conversation_survives_a_reload(page_server, browser):
    b = browser
    n = b.eval("document.querySelectorAll('.msg').length")
    assert n == 2  # the stopped exchange, in the chat opened for it
    assert b.eval("document.querySelectorAll('#conversations li').length") >= 2
    b.navigate(page_server.url + "/?reloaded")
    assert b.wait_for(f"document.querySelectorAll('.msg').length === {n}", what="the stored conversation")
    assert b.eval("document.getElementById('api-key').value") == API_KEY  # settings kept too


def test_disable_frontend():
    s = Server("--max-model-len", "256", switches=("--disable-frontend",))
    try:
        assert requests.get(s.url + "/", timeout=10).status_code == 404
        assert s.post("/v1/completions", {"prompt": "Hi", "max_tokens": 1}).status_code == 200
    finally:
        s.stop()
