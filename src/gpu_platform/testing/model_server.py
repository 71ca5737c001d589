"""A small OpenAI-compatible model server: a real process for tests, demos and benchmarks.

    python -m gpu_platform.testing.model_server --port 0 --model tiny [--token-delay-ms 15]
    python -m gpu_platform.testing.model_server --port-env PORT --model tiny   # as a service

It prints ``listening on http://HOST:PORT`` (one line, flushed) once it accepts connections,
so a parent started with ``--port 0`` learns the port. Standard library only (asyncio streams,
HTTP/1.1 keep-alive) so it starts in tens of milliseconds.

Endpoints: ``GET /health``, ``GET /v1/models``, ``POST /v1/chat/completions`` and
``/v1/completions`` (``stream: true`` answers server-sent events, chunked; with
``stream_options.include_usage`` the last chunk carries usage), ``POST /v1/embeddings``.

Tokens are deterministic: the reply to a prompt is the same on every replica, so tests can
compare. ``max_tokens`` (default 8) tokens are produced. ``--token-delay-ms`` models a GPU's
decode time, which costs the host no CPU: each token (the first one too, standing for the
prefill) is ready that long after the one before, so a stream's events come that far apart and
a non-streamed answer comes after ``max_tokens`` times the delay (a sleep on the event loop:
deterministic, and free of CPU while it waits). Every answer names the replica in
``system_fingerprint`` (``--replica-id``, default ``pid-<pid>``), and in an
``X-Replica-Id`` header, so a test can see where the gateway sent it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ModelServerConfig",
    "ModelServerProcess",
    "completion_tokens",
    "main",
    "prompt_token_count",
    "serve",
    "spawn_model_server",
]

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")


@dataclass(frozen=True, slots=True)
class ModelServerConfig:
    host: str
    port: int
    models: tuple[str, ...]
    token_delay_s: float  # before each token (the first one too); 0: answers at once
    replica_id: str


def prompt_token_count(text: str) -> int:
    """Whitespace-separated words; the server's (and its tests') notion of a prompt token."""
    return len(text.split())


def completion_tokens(prompt: str, count: int) -> list[str]:
    """The `count` tokens the server answers to `prompt`: deterministic, each ending in a space."""
    seed = hashlib.sha256(prompt.encode()).digest()
    return [_WORDS[seed[i % len(seed)] % len(_WORDS)] + " " for i in range(count)]


def _embedding(text: str, dims: int = 8) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [round(b / 255.0, 6) for b in digest[:dims]]


def _chat_prompt(body: dict[str, Any]) -> str:
    parts = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "\n".join(parts)


def _error(message: str, code: str, status: int) -> tuple[int, dict[str, Any]]:
    return status, {"error": {"message": message, "type": "invalid_request_error", "code": code}}


class _Server:
    def __init__(self, config: ModelServerConfig) -> None:
        self.config = config
        self._counter = 0

    def _id(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}-{self.config.replica_id}-{self._counter}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                body = await reader.readexactly(length) if length else b""
                keep = await self._dispatch(method, path.split("?", 1)[0], body, writer)
                if not keep or headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    async def _dispatch(
        self, method: str, path: str, raw: bytes, writer: asyncio.StreamWriter
    ) -> bool:
        if method == "GET" and path == "/health":
            return await self._send(writer, 200, {"status": "ok"})
        if method == "GET" and path == "/v1/models":
            data = [
                {"id": m, "object": "model", "created": 0, "owned_by": "model-server"}
                for m in self.config.models
            ]
            return await self._send(writer, 200, {"object": "list", "data": data})
        if path not in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings"):
            return await self._send(writer, *_error(f"no route {path}", "not_found", 404))
        if method != "POST":
            return await self._send(writer, *_error("use POST", "method_not_allowed", 405))
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("body")
        except ValueError:
            return await self._send(writer, *_error("body is not a JSON object", "bad_json", 400))
        model = body.get("model")
        if model not in self.config.models:
            return await self._send(writer, *_error(f"unknown model {model!r}", "model", 404))
        if path == "/v1/embeddings":
            return await self._send(writer, 200, self._embeddings(body))
        chat = path == "/v1/chat/completions"
        prompt = _chat_prompt(body) if chat else str(body.get("prompt", ""))
        count = int(body.get("max_tokens") or body.get("max_completion_tokens") or 8)
        tokens = completion_tokens(prompt, max(0, count))
        usage = {
            "prompt_tokens": prompt_token_count(prompt),
            "completion_tokens": len(tokens),
            "total_tokens": prompt_token_count(prompt) + len(tokens),
        }
        if body.get("stream"):
            options = body.get("stream_options") or {}
            with_usage = bool(isinstance(options, dict) and options.get("include_usage"))
            await self._stream(writer, chat, str(model), tokens, usage if with_usage else None)
            return True
        if self.config.token_delay_s and tokens:
            await asyncio.sleep(self.config.token_delay_s * len(tokens))
        text = "".join(tokens)
        ident = self._id("chatcmpl" if chat else "cmpl")
        choice: dict[str, Any]
        if chat:
            message = {"role": "assistant", "content": text}
            choice = {"index": 0, "message": message, "finish_reason": "length"}
        else:
            choice = {"index": 0, "text": text, "finish_reason": "length", "logprobs": None}
        answer = {
            "id": ident,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": self.config.replica_id,
            "choices": [choice],
            "usage": usage,
        }
        return await self._send(writer, 200, answer)

    def _embeddings(self, body: dict[str, Any]) -> dict[str, Any]:
        raw = body.get("input", "")
        inputs = [raw] if isinstance(raw, str) else [str(x) for x in raw]
        data = [
            {"object": "embedding", "index": i, "embedding": _embedding(text)}
            for i, text in enumerate(inputs)
        ]
        tokens = sum(prompt_token_count(t) for t in inputs)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return {"object": "list", "data": data, "model": body["model"], "usage": usage}

    async def _send(self, writer: asyncio.StreamWriter, status: int, payload: Any) -> bool:
        data = json.dumps(payload, separators=(",", ":")).encode()
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            f"X-Replica-Id: {self.config.replica_id}\r\n\r\n"
        )
        writer.write(head.encode() + data)
        await writer.drain()
        return True

    async def _stream(
        self,
        writer: asyncio.StreamWriter,
        chat: bool,
        model: str,
        tokens: list[str],
        usage: dict[str, int] | None,
    ) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n"
            + f"X-Replica-Id: {self.config.replica_id}\r\n\r\n".encode()
        )
        ident = self._id("chatcmpl" if chat else "cmpl")
        base = {
            "id": ident,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": self.config.replica_id,
        }

        async def event(payload: dict[str, Any] | str) -> None:
            text = payload if isinstance(payload, str) else json.dumps(payload)
            data = f"data: {text}\n\n".encode()
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await writer.drain()

        for i, token in enumerate(tokens):
            if self.config.token_delay_s:
                await asyncio.sleep(self.config.token_delay_s)
            last = i == len(tokens) - 1
            choice: dict[str, Any]
            if chat:
                delta = {"role": "assistant", "content": token} if i == 0 else {"content": token}
                choice = {"index": 0, "delta": delta, "finish_reason": "length" if last else None}
            else:
                choice = {"index": 0, "text": token, "finish_reason": "length" if last else None}
            chunk: dict[str, Any] = {**base, "choices": [choice]}
            if usage is not None:
                chunk["usage"] = None
            await event(chunk)
        if usage is not None:
            await event({**base, "choices": [], "usage": usage})
        await event("[DONE]")
        writer.write(b"0\r\n\r\n")
        await writer.drain()


async def serve(config: ModelServerConfig) -> None:
    """Serve until cancelled; prints the listening line once bound."""
    server = await asyncio.start_server(_Server(config).handle, config.host, config.port)
    port = server.sockets[0].getsockname()[1]
    print(f"listening on http://{config.host}:{port}", flush=True)
    async with server:
        await server.serve_forever()


@dataclass
class ModelServerProcess:
    """A running model server; `stop()` (or `kill()`, to simulate a crash) ends it."""

    url: str
    replica_id: str
    process: subprocess.Popen[bytes] = field(repr=False)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process.wait(timeout=10)


def spawn_model_server(
    *models: str, replica_id: str, token_delay_ms: float = 0.0, timeout_s: float = 15.0
) -> ModelServerProcess:
    """Start a model server on a free loopback port and wait for its listening line."""
    argv = [sys.executable, "-m", "gpu_platform.testing.model_server", "--port", "0"]
    for model in models:
        argv += ["--model", model]
    argv += ["--token-delay-ms", str(token_delay_ms), "--replica-id", replica_id]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE)
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    line = b""
    while time.monotonic() < deadline and not line.startswith(b"listening on "):
        line = process.stdout.readline()
        if not line and process.poll() is not None:
            break
    if not line.startswith(b"listening on "):
        process.kill()
        process.wait()
        raise RuntimeError(f"model server {replica_id} did not start (exit {process.poll()})")
    url = line.decode().split("listening on ", 1)[1].strip()
    return ModelServerProcess(url=url, replica_id=replica_id, process=process)


def _parse(argv: Sequence[str] | None) -> ModelServerConfig:
    parser = argparse.ArgumentParser(prog="model_server", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=None, help="0 picks a free port")
    parser.add_argument("--port-env", default=None, help="read the port from this variable")
    parser.add_argument("--model", action="append", required=True, help="repeat for several")
    parser.add_argument(
        "--token-delay-ms",
        "--delay-ms",
        dest="token_delay_ms",
        type=float,
        default=0.0,
        help="modelled decode time per token (the first one too); 0: answer at once",
    )
    parser.add_argument("--replica-id", default=f"pid-{os.getpid()}")
    args = parser.parse_args(argv)
    port = args.port
    if port is None and args.port_env:
        value = os.environ.get(args.port_env, "")
        if not value.isdigit():
            parser.error(f"--port-env {args.port_env}: variable is unset or not a port: {value!r}")
        port = int(value)
    if port is None:
        parser.error("give --port or --port-env")
    return ModelServerConfig(
        args.host, port, tuple(args.model), args.token_delay_ms / 1000.0, args.replica_id
    )


def main(argv: Sequence[str] | None = None) -> None:
    config = _parse(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(config))


if __name__ == "__main__":
    main()
