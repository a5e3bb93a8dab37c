"""converters.serve: one file, once, on loopback, for ui.perfetto.dev (docs/design.md §9).

Real HTTP against serve_once running in a thread on a free high port, never a browser.
"""

from __future__ import annotations

import http.client
import os
import socket
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from converters import serve
from converters.errors import UsageError
from converters.serve import UI_ORIGIN, perfetto_url, serve_once

NAME = "run 1+ü.pftrace"  # a space, a plus and non-ASCII: the name must be quoted
QUOTED = "/run%201%2B%C3%BC.pftrace"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Running:
    """serve_once in a thread; ``result`` once it returns."""

    def __init__(self, path: Path, timeout_s: float = 10.0, **kwargs) -> None:
        self.path, self.port, self.lines = path, free_port(), []
        self.listening = threading.Event()
        self.result: bool | None = None
        self.error: BaseException | None = None

        def announce(line: str) -> None:
            self.lines.append(line)
            if line.startswith("Serving"):
                self.listening.set()

        def run() -> None:
            try:
                self.result = serve_once(
                    path, port=self.port, open_browser=False, announce=announce, timeout_s=timeout_s, **kwargs
                )
            except BaseException as e:  # reported by the test
                self.error = e
                self.listening.set()

        self.thread = threading.Thread(target=run, name="serve_once under test")
        self.thread.start()
        assert self.listening.wait(5), "serve_once did not start listening"
        assert self.error is None, self.error

    def request(self, method: str, target: str, headers: dict | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            conn.request(method, target, headers=headers or {})
            response = conn.getresponse()
            return response.status, response.headers, response.read()
        finally:
            conn.close()

    def join(self) -> bool | None:
        self.thread.join(5)
        assert not self.thread.is_alive(), "serve_once did not return"
        assert self.error is None, self.error
        return self.result


@pytest.fixture(autouse=True)
def no_threads_left():
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 2
    while set(threading.enumerate()) - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not set(threading.enumerate()) - before, "a thread was left running"


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / NAME
    path.write_bytes(os.urandom(3 * serve.BLOCK + 12345))  # several blocks, the last one short
    (tmp_path / "secret.txt").write_text("not to be served")
    return path


@pytest.fixture
def server(trace: Path):
    running = Running(trace)
    yield running
    if running.thread.is_alive():  # the test did not fetch the file: do it now to stop the server
        try:
            running.request("GET", QUOTED)
        except OSError:
            pass
        running.join()


def assert_refused(port: int) -> None:
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_perfetto_url_quotes_the_name():
    assert perfetto_url("trace.json") == "https://ui.perfetto.dev/#!/?url=http://127.0.0.1:9001/trace.json"
    assert perfetto_url(NAME, port=9123) == f"https://ui.perfetto.dev/#!/?url=http://127.0.0.1:9123{QUOTED}"
    assert (
        perfetto_url("a/b?c#d&e") == "https://ui.perfetto.dev/#!/?url=http://127.0.0.1:9001/a%2Fb%3Fc%23d%26e"
    )
    assert serve.PORT == 9001


def test_get_sends_the_file_with_cors_then_stops_and_closes_the_port(server: Running, trace: Path, capfd):
    status, headers, body = server.request("GET", QUOTED, {"Origin": UI_ORIGIN})
    assert status == 200
    assert body == trace.read_bytes()
    assert headers["Content-Type"] == "application/octet-stream"
    assert headers["Content-Length"] == str(trace.stat().st_size)
    assert headers["Access-Control-Allow-Origin"] == "https://ui.perfetto.dev"
    assert headers["Cache-Control"] == "no-cache"
    assert server.join() is True
    assert_refused(server.port)
    assert capfd.readouterr() == ("", "")  # the HTTP server's log is silenced


def test_head_answers_headers_without_body_and_keeps_serving(server: Running, trace: Path):
    status, headers, body = server.request("HEAD", QUOTED)
    assert (status, body) == (200, b"")
    assert headers["Content-Length"] == str(trace.stat().st_size)
    assert headers["Content-Type"] == "application/octet-stream"
    assert headers["Access-Control-Allow-Origin"] == UI_ORIGIN
    assert server.thread.is_alive()


def test_preflight(server: Running):
    status, headers, body = server.request(
        "OPTIONS",
        QUOTED,
        {
            "Origin": UI_ORIGIN,
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "range",
            "Access-Control-Request-Private-Network": "true",
        },
    )
    assert (status, body) == (204, b"")
    assert headers["Access-Control-Allow-Origin"] == UI_ORIGIN
    assert "GET" in headers["Access-Control-Allow-Methods"]
    assert "OPTIONS" in headers["Access-Control-Allow-Methods"]
    assert headers["Access-Control-Allow-Headers"] == "range"
    assert int(headers["Access-Control-Max-Age"]) > 0
    assert headers["Access-Control-Allow-Private-Network"] == "true"
    status, headers, _ = server.request("OPTIONS", QUOTED)  # no requested headers: allow any
    assert (status, headers["Access-Control-Allow-Headers"]) == (204, "*")
    assert server.thread.is_alive()


OTHER_TARGETS = [
    "/",
    "/secret.txt",
    "/../secret.txt",
    "/%2e%2e/secret.txt",
    "/%2E%2E%2Fsecret.txt",
    "/..%2f..%2f..%2fetc%2fpasswd",
    "/../../../../etc/passwd",
    "//etc/passwd",
    "/etc/passwd",
    QUOTED + "/",
    QUOTED + "/../secret.txt",
    "/./" + QUOTED[1:],
    QUOTED + "?x=1",
    QUOTED[1:],
    "*",
]


def test_any_other_path_is_404_with_cors(server: Running):
    for target, method in [(t, m) for t in OTHER_TARGETS for m in ("GET", "HEAD", "OPTIONS")]:
        status, headers, body = server.request(method, target)
        assert status == 404, (method, target)
        assert headers["Access-Control-Allow-Origin"] == UI_ORIGIN
        assert b"not to be served" not in body and len(body) < 100  # a short error text, no file
    assert server.thread.is_alive()


def test_absolute_paths_and_other_methods_are_refused(server: Running, trace: Path):
    for target in ("/" + str(trace), str(trace), "/" + str(trace.parent / "secret.txt")):
        status, _, body = server.request("GET", quote(target))
        assert status == 404 and b"not to be served" not in body
    for method in ("POST", "PUT", "DELETE", "PATCH", "BREW"):
        status, headers, _ = server.request(method, QUOTED)
        assert status in (404, 405), method
        assert headers["Access-Control-Allow-Origin"] == UI_ORIGIN
    assert server.thread.is_alive()


def test_only_a_complete_get_stops_it(server: Running, trace: Path):
    conn = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    conn.sendall(f"GET {QUOTED} HTTP/1.0\r\n\r\n".encode())
    conn.recv(100)  # the start of the answer, then hang up mid-body
    conn.close()
    time.sleep(0.15)
    assert server.thread.is_alive()
    status, _, body = server.request("GET", QUOTED)
    assert (status, body == trace.read_bytes()) == (200, True)
    assert server.join() is True


def test_an_idle_connection_does_not_block_the_fetch_or_the_exit(server: Running, trace: Path):
    idle = socket.create_connection(("127.0.0.1", server.port), timeout=5)  # a browser preconnect
    try:
        status, _, body = server.request("GET", QUOTED)
        assert status == 200 and body == trace.read_bytes()
        started = time.monotonic()
        assert server.join() is True
        assert time.monotonic() - started < 2
    finally:
        idle.close()


def test_announce_gives_the_url_and_the_ssh_hint_without_a_browser(server: Running):
    text = "\n".join(server.lines)
    assert perfetto_url(NAME, server.port) in text
    assert f"ssh -L {server.port}:127.0.0.1:{server.port} {socket.gethostname()}" in text


def test_browser_opened_means_no_ssh_hint(trace: Path, monkeypatch):
    opened = []
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setattr(serve.webbrowser, "open", lambda url: opened.append(url) or True)
    lines: list[str] = []
    port = free_port()
    assert serve_once(trace, port=port, announce=lines.append, timeout_s=0.2) is False
    assert opened == [perfetto_url(NAME, port)]
    assert any(perfetto_url(NAME, port) in line for line in lines)
    assert not any("ssh -L" in line for line in lines)


def test_browser_that_fails_to_open_gives_the_ssh_hint(trace: Path, monkeypatch):
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setattr(serve.webbrowser, "open", lambda url: False)
    lines: list[str] = []
    assert serve_once(trace, port=free_port(), announce=lines.append, timeout_s=0.1) is False
    assert any("ssh -L" in line for line in lines)


def test_headless_machine_does_not_start_a_console_browser(trace: Path, monkeypatch):
    for var in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(serve.sys, "platform", "linux")
    monkeypatch.setattr(serve.webbrowser, "open", lambda url: pytest.fail("webbrowser.open was called"))
    lines: list[str] = []
    assert serve_once(trace, port=free_port(), announce=lines.append, timeout_s=0.1) is False
    assert any("ssh -L" in line for line in lines)


def test_timeout_returns_false_and_closes_the_port(trace: Path):
    port = free_port()
    started = time.monotonic()
    assert (
        serve_once(trace, port=port, open_browser=False, announce=lambda line: None, timeout_s=0.3) is False
    )
    assert 0.25 <= time.monotonic() - started < 2
    assert_refused(port)


def test_ctrl_c_returns_false_and_closes_the_port(trace: Path):
    port = free_port()

    def announce(line: str) -> None:
        if line.startswith("Serving"):
            raise KeyboardInterrupt

    assert serve_once(trace, port=port, open_browser=False, announce=announce) is False
    assert_refused(port)


def test_port_in_use_is_a_usage_error(trace: Path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(UsageError, match=f"port {port} on 127.0.0.1 is in use.*trace2perfetto --open"):
            serve_once(trace, port=port, open_browser=False, announce=lambda line: None, timeout_s=1)


def test_missing_file_is_a_usage_error(tmp_path: Path):
    with pytest.raises(UsageError, match="no such file"):
        serve_once(tmp_path / "absent.json", port=free_port(), open_browser=False, announce=print)


def test_binds_loopback_only(server: Running):
    lan = [a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)]
    for address in {a for a in lan if not a.startswith("127.")}:
        with pytest.raises(OSError):
            socket.create_connection((address, server.port), timeout=1).close()
    assert server.thread.is_alive()


def test_a_foreign_host_header_is_refused(server: Running, trace: Path):
    """A page elsewhere reaching 127.0.0.1 through DNS rebinding sends its own host name."""
    target = "/" + quote(trace.name, safe="")
    status, _, body = server.request("GET", target, {"Host": f"evil.example:{server.port}"})
    assert status == 404 and trace.read_bytes()[:64] not in body
    assert server.thread.is_alive()
