"""Session fixtures for the server suites: one server, one openai client."""
import pytest

from server_process import Server


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    rc = s.proc.poll()
    s.stop()
    assert rc is None, "the server died during the tests"


@pytest.fixture(scope="session")
def client(server):
    return server.client()
