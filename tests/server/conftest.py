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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test that used the session server shows the server log's tail."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and "server" in item.fixturenames:
        s = item.funcargs.get("server")
        if s is not None:
            report.sections.append(("server log (tail)", s.log_text()))
