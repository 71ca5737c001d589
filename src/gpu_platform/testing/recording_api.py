"""A stand-in for the REST API's POST /v1/jobs on loopback, for CLI tests that need an answer
but not a cluster: it records each request (path, Authorization header, JSON body) and
answers 201 with the job (`j-0001`, PENDING), or a 422 problem+json for a command named
`refuse`."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["RecordingApi", "recording_api"]


class RecordingApi:
    def __init__(self, url: str) -> None:
        self.url = url
        self.sent: list[dict[str, Any]] = []


@contextlib.contextmanager
def recording_api() -> Iterator[RecordingApi]:
    api = RecordingApi("")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            auth = self.headers.get("Authorization")
            api.sent.append({"path": self.path, "auth": auth, **body})
            if body["command"][0] == "refuse":
                status, answer = 422, {"detail": "gpus: [refused] by the test server"}
            else:
                status, answer = 201, {"id": f"j-{len(api.sent):04d}", "state": "PENDING"}
                answer |= body
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    api.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
