"""`<data_dir>/ports.json`: written whole once a server listens, read back, removed by its
writer only; a uvicorn server on port 0 reports a port that answers."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI

from gpu_platform.infrastructure.bound_ports import (
    ReportingServer,
    bind_any_port,
    forget_ports,
    read_ports,
    report_ports,
)


def test_the_ports_file_names_the_writer_and_only_the_writer_removes_it(tmp_path: Path) -> None:
    assert read_ports(tmp_path) is None
    report_ports(tmp_path, {"rest": 1234, "grpc": 2345})
    assert read_ports(tmp_path) == {"pid": os.getpid(), "rest": 1234, "grpc": 2345}
    assert [p.name for p in tmp_path.iterdir()] == ["ports.json"]  # no temporary file left
    (tmp_path / "ports.json").write_text(json.dumps({"pid": 1, "rest": 1}))  # another's
    forget_ports(tmp_path)
    assert read_ports(tmp_path) == {"pid": 1, "rest": 1}
    report_ports(tmp_path, {"rest": 1})
    forget_ports(tmp_path)
    assert read_ports(tmp_path) is None
    (tmp_path / "ports.json").write_text("[1, 2")  # not ours: ignored, left alone
    forget_ports(tmp_path)
    assert read_ports(tmp_path) is None and (tmp_path / "ports.json").exists()


def test_a_server_on_port_zero_reports_the_port_it_got_once_it_answers(tmp_path: Path) -> None:
    app = FastAPI()
    app.get("/ping")(lambda: {"ok": True})
    sock = bind_any_port("127.0.0.1")
    reported = threading.Event()

    def listening() -> None:  # called on uvicorn's loop once it accepts
        report_ports(tmp_path, {"rest": sock.getsockname()[1]})
        reported.set()

    config = uvicorn.Config(app, log_config=None, lifespan="off")
    server = ReportingServer(config, listening)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        assert reported.wait(30)
        port = (read_ports(tmp_path) or {})["rest"]
        assert port != 0
        assert httpx.get(f"http://127.0.0.1:{port}/ping", timeout=10).json() == {"ok": True}
    finally:
        server.should_exit = True
        thread.join(10)
