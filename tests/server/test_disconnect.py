"""Issue 36 item 8: a non-streaming request whose client closes its socket (an
orderly close, as clients do on a timeout) is aborted within a step and
counted, whether it was running or still queued; a streaming one too."""
import json
import socket
import time

import pytest

from server_process import Server


@pytest.fixture(scope="module")
def server():
    s = Server("--max-num-seqs", "1", "--max-num-batched-tokens", "32", "--max-model-len", "1024")
    yield s
    s.stop()


def open_and_close(server, body, after_s):
    payload = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + server.api_key.encode() +
                 b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(payload)).encode() +
                 b"\r\n\r\n" + payload)
    time.sleep(after_s)
    sock.close()


def aborted(server):
    return server.metric("nanoserve:request_success_total", finished_reason="abort")


def wait_for(cond, timeout=30):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.02)


@pytest.mark.parametrize("stream", [False, True])
def test_client_that_closes_is_aborted_and_counted(server, stream):
    prompt = list(range(100, 580))  # 480 tokens: 15 prefill steps of 32
    body = {"model": server.model, "prompt": prompt, "max_tokens": 200, "ignore_eos": True, "stream": stream}
    before = aborted(server)
    open_and_close(server, body, 0.05)
    wait_for(lambda: aborted(server) == before + 1)
    wait_for(lambda: server.metric("nanoserve:num_requests_running") == 0)
    # Queued behind a running request (max-num-seqs 1): closed while it waits.
    payload = json.dumps(dict(body, stream=False)).encode()
    keep = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    keep.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + server.api_key.encode() +
                 b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(payload)).encode() +
                 b"\r\n\r\n" + payload)
    wait_for(lambda: server.metric("nanoserve:num_requests_running") == 1)
    open_and_close(server, body, 0.3)
    wait_for(lambda: aborted(server) == before + 2)
    assert server.metric("nanoserve:num_requests_waiting") == 0
    keep.close()
    wait_for(lambda: aborted(server) == before + 3)
    wait_for(lambda: server.metric("nanoserve:num_requests_running") == 0)
