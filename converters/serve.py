"""Hand a finished trace to ui.perfetto.dev (docs/design.md §9): serve it once on 127.0.0.1:9001.

The Perfetto UI runs in the browser and can load a trace from a URL given in its address
(``https://ui.perfetto.dev/#!/?url=...``). Its content security policy lets it fetch from one local
address only, ``http://127.0.0.1:9001``, so that is where the trace is served, with
``Access-Control-Allow-Origin: https://ui.perfetto.dev`` so the page may read the answer.

The rule is one file, once: the server binds loopback only (never ``0.0.0.0``), answers ``GET``
and ``HEAD`` for the file's own name and nothing else (no directory listing, no other path, so no
way to reach any other file on disk), and stops as soon as the file has been sent completely
once. Ctrl-C or the optional timeout stop it too. A remote machine is reached with an ssh tunnel
(``ssh -L 9001:127.0.0.1:9001 host``), which keeps the file off the network.

Standard library only. Nothing is printed here: the lines for the user go to ``announce``, and
the HTTP server's own log is silenced.
"""

from __future__ import annotations

import errno
import os
import socket
import socketserver
import sys
import threading
import time
import webbrowser
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote

from .errors import UsageError

PORT = 9001
HOST = "127.0.0.1"
UI_ORIGIN = "https://ui.perfetto.dev"
BLOCK = 1 << 20  # bytes per write while streaming the file
POLL_S = 0.1  # how often the serving loop looks for "fetched", Ctrl-C and the timeout
PREFLIGHT_MAX_AGE_S = 600

_ADDRESS_IN_USE = {errno.EADDRINUSE, 10048}  # 10048: WSAEADDRINUSE


# Why --open writes JSON when no output is named: BENCHMARKS.md, "The .pftrace load, priced on real
# ranks" (Perfetto's importer decodes a protobuf packet and its args dearer than the JSON text of the
# same slice: the importer's floor, not our encoding's).
FASTER_IN_THE_UI = ("the Perfetto UI loads our .json of a trace faster than its .pftrace (1.5x to 2.2x on "
                    "real ranks, BENCHMARKS.md; 3-4x the bytes, so --max-size keeps fewer steps of detail); "
                    "-o NAME.pftrace serves the protobuf")


def output_for_ui(profile: str, output: str | None, fmt: str | None, say: Callable[[str], None]) -> str:
    """The file ``--open`` writes and serves: the one named (``-o``, or the format ``--format``
    names, by the default name), never changed; else ``PROFILER_DIR.json`` beside the input, the
    form the UI loads faster, said in one line through ``say``."""
    if output == "-":
        raise UsageError("--open serves a file; give -o FILE, not -o -")
    if output is not None or fmt is not None:
        return output
    path = Path(profile).resolve()
    chosen = str(path.parent / (path.name + ".json"))
    say(f"--open: writing {chosen} (JSON, not .pftrace): {FASTER_IN_THE_UI}")
    return chosen


def serve_to_ui(path: Path, where: str, announce: Callable[[str], None]) -> None:
    """``serve_once`` for ``--open``: stopped (Ctrl-C) before the UI fetched the trace, it says where
    the trace stays."""
    try:
        fetched = serve_once(path, announce=announce)
    except KeyboardInterrupt:
        fetched = False
    if not fetched:
        announce(f"stopped before the UI fetched the trace; it stays at {where}")


def perfetto_url(name: str, port: int = PORT) -> str:
    """The ui.perfetto.dev address that makes the UI fetch ``name`` from this machine's ``port``."""
    return f"{UI_ORIGIN}/#!/?url=http://{HOST}:{port}/{quote(name, safe='')}"


def serve_once(
    path: Path,
    *,
    port: int = PORT,
    open_browser: bool = True,
    announce: Callable[[str], None] = print,
    timeout_s: float | None = None,
) -> bool:
    """Serve ``path`` on 127.0.0.1:``port`` until it has been fetched completely once.

    Returns True once a ``GET`` of the file has sent every byte; False on Ctrl-C or when
    ``timeout_s`` passes without such a fetch. Raises ``UsageError`` if the file is missing or the
    port cannot be bound (typically: another ``--open`` is still waiting).
    """
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such file to serve")
    server = _bind(path, port)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        url = perfetto_url(path.name, port)
        announce(f"Open the trace in the Perfetto UI: {url}")
        if not (open_browser and _open_browser(url)):
            announce(
                f"No browser here? On your own machine run: ssh -L {port}:{HOST}:{port} "
                f"{socket.gethostname()}"
            )
            announce("and, while it is connected, open the URL above in a local browser.")
        announce(f"Serving {path.name} once on http://{HOST}:{port}/ (Ctrl-C to stop)...")
        while not server.fetched.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            server.handle_request()  # returns after one connection or POLL_S
        return True
    except KeyboardInterrupt:
        return False
    finally:
        server.server_close()


def _bind(path: Path, port: int) -> _OneFileServer:
    try:
        return _OneFileServer(path, port)
    except OSError as e:
        if e.errno in _ADDRESS_IN_USE or getattr(e, "winerror", None) == 10048:
            raise UsageError(
                f"port {port} on {HOST} is in use; is another trace2perfetto --open running? "
                f"Stop it, or open the trace by hand with Open trace file at {UI_ORIGIN}"
            ) from None
        raise UsageError(f"cannot listen on {HOST}:{port}: {e.strerror or e}") from None


def _open_browser(url: str) -> bool:
    """Open ``url`` in a graphical browser; False when there is none to open."""
    if (
        sys.platform.startswith(("linux", "freebsd", "openbsd", "netbsd"))
        and not os.environ.get("BROWSER")
        and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    ):
        return False  # headless: webbrowser would start lynx or w3m in this terminal
    try:
        return bool(webbrowser.open(url))
    except webbrowser.Error:
        return False


class _OneFileServer(ThreadingHTTPServer):
    """A loopback server for one file, whose connections are all closed when it closes."""

    allow_reuse_address = os.name != "nt"  # on Windows SO_REUSEADDR would let two servers share
    daemon_threads = False  # server_close() joins the handler threads...
    block_on_close = True
    timeout = POLL_S  # handle_request() returns after this long without a connection

    def __init__(self, path: Path, port: int) -> None:
        self.file_path = path
        self.url_path = "/" + path.name
        self.fetched = threading.Event()
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__((HOST, port), _OneFileHandler)

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)  # HTTPServer's would do a slow getfqdn()
        self.server_name, self.server_port = HOST, self.server_address[1]

    def process_request(self, request, client_address) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def server_close(self) -> None:
        # ...which return promptly once their sockets are shut: an idle browser preconnect or a
        # stalled download must not keep us waiting.
        with self._open_lock:
            still_open = list(self._open)
        for request in still_open:
            try:
                request.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        super().server_close()

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # the client went away; nothing to report
        super().handle_error(request, client_address)  # a traceback on stderr, never stdout


class _OneFileHandler(BaseHTTPRequestHandler):
    """GET/HEAD of the one file, CORS preflight for it, 404 for every other path."""

    server: _OneFileServer
    server_version = "trace2perfetto"
    sys_version = ""
    timeout = 30  # seconds a connection may stay silent

    def _is_the_file(self) -> bool:
        # The Host check stops a page on another site from reaching us by DNS rebinding.
        port = self.server.server_address[1]
        local = self.headers.get("Host", "") in (f"127.0.0.1:{port}", f"localhost:{port}")
        return local and unquote(self.path, errors="replace") == self.server.url_path

    def do_GET(self) -> None:
        self._send_file(with_body=True)

    def do_HEAD(self) -> None:
        self._send_file(with_body=False)

    def do_OPTIONS(self) -> None:
        if not self._is_the_file():
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        self.send_response(HTTPStatus.NO_CONTENT)
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
        self.send_header(
            "Access-Control-Allow-Headers", self.headers.get("Access-Control-Request-Headers", "*")
        )
        self.send_header("Access-Control-Max-Age", str(PREFLIGHT_MAX_AGE_S))
        if self.headers.get("Access-Control-Request-Private-Network", "").lower() == "true":
            self.send_header("Access-Control-Allow-Private-Network", "true")  # Chrome's check
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _send_file(self, with_body: bool) -> None:
        if not self._is_the_file():
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        try:
            f = open(self.server.file_path, "rb")
        except OSError:
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        with f:
            size = os.fstat(f.fileno()).st_size
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            if not with_body:
                return
            sent = 0
            while sent < size:
                block = f.read(min(BLOCK, size - sent))
                if not block:
                    break  # the file shrank under us: the client sees a short body
                self.wfile.write(block)
                sent += len(block)
            self.wfile.flush()
        if sent == size:
            self.server.fetched.set()
        else:
            self.close_connection = True

    def send_error(self, code, message=None, explain=None) -> None:
        """A short plain-text error, always with the CORS origin; unknown methods get 405."""
        if code == HTTPStatus.NOT_IMPLEMENTED:  # what BaseHTTPRequestHandler says for a method
            code = HTTPStatus.METHOD_NOT_ALLOWED  # without a do_ method
        code = HTTPStatus(code)
        body = f"{code.value} {code.phrase}\n".encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        if code == HTTPStatus.METHOD_NOT_ALLOWED:
            self.send_header("Allow", "GET, HEAD, OPTIONS")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def end_headers(self) -> None:
        self.send_header("Access-Control-Allow-Origin", UI_ORIGIN)
        super().end_headers()

    def log_message(self, format, *args) -> None:
        pass  # quiet: stdout may carry a trace (-o -) and the user needs only announce's lines
