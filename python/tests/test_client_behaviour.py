"""The client behaviour fixture (tests/fixtures/client-behaviour.json), run against a scripted
server: what the Rust and TypeScript clients are held to as well."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

import oncebox
from oncebox.client import Client, RetryConfig

FIXTURE = json.loads(
    (
        Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "client-behaviour.json"
    ).read_text()
)


class Script:
    """A server that answers each request with the next scripted answer and records what came."""

    def __init__(self, case: dict[str, Any]) -> None:
        self.answers: list[dict[str, Any]] = case["answers"]
        self.key = case["call"]["key"]
        self.seen: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("content-length") or 0)
        body = handler.rfile.read(length) if length else b""
        with self.lock:
            self.seen.append(
                {
                    "method": handler.command,
                    "target": handler.path,
                    "key": handler.headers.get("idempotency-key"),
                    "body": body,
                }
            )
            answer = self.answers[min(len(self.seen), len(self.answers)) - 1]
        if answer.get("drop"):
            handler.close_connection = True
            handler.connection.shutdown(socket.SHUT_RDWR)
            return
        if "intent" in answer:
            doc = {**FIXTURE["intent"], "idempotency_key": self.key, **answer["intent"]}
        else:
            doc = {"status": answer["status"], **answer["problem"]}
        text = json.dumps(doc).encode()
        handler.send_response(answer["status"])
        for name, value in answer.get("headers", {}).items():
            handler.send_header(name, value)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(text)))
        handler.end_headers()
        handler.wfile.write(text)


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []

    def start(script: Script) -> str:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                script.answer(self)

            def do_POST(self) -> None:
                script.answer(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def run(client: Client, call: dict[str, Any]) -> tuple[oncebox.Intent, bool | None]:
    op, key = call["op"], call["key"]
    if op == "submit":
        submitted = client.submit(key, call["action"], call["arguments"])
        return submitted.intent, submitted.created
    if op == "get":
        return client.get(key), None
    if op == "cancel":
        return client.cancel(key), None
    assert op == "wait", op
    return client.wait(key, call["timeout_s"]), None


KINDS: dict[str, type[Exception]] = {
    "ApiError": oncebox.ApiError,
    "TransportError": oncebox.TransportError,
    "InvalidIntent": oncebox.InvalidIntent,
}


@pytest.mark.parametrize("case", FIXTURE["cases"], ids=[c["name"] for c in FIXTURE["cases"]])
def test_the_client_behaves_as_the_fixture_says(serve: Any, case: dict[str, Any]) -> None:
    script = Script(case)
    retry = case["retry"]
    client = Client(
        serve(script),
        "token",
        retry=RetryConfig(
            max_attempts=retry["attempts"],
            min_delay=retry["min_delay_ms"] / 1000,
            max_delay=retry["max_delay_ms"] / 1000,
        ),
        timeout=5.0,
    )
    expect = case["expect"]
    started = time.monotonic()
    with client:
        if "error" in expect:
            want = expect["error"]
            with pytest.raises(KINDS[want["kind"]]) as raised:
                run(client, case["call"])
            if "status" in want:
                assert getattr(raised.value, "status", None) == want["status"]
            if "field" in want:
                assert getattr(raised.value, "field", None) == want["field"]
        else:
            intent, created = run(client, case["call"])
            assert intent.status.value == expect["status"]
            if "created" in expect:
                assert created is expect["created"]
    elapsed_ms = (time.monotonic() - started) * 1000
    seen = script.seen
    assert len(seen) == expect["requests"], [s["target"] for s in seen]
    paths = expect.get("paths", [])
    for n, request in enumerate(seen if paths else []):
        method, path = paths[min(n, len(paths) - 1)].split(" ", 1)
        assert (request["method"], urlsplit(request["target"]).path) == (method, path)
    if expect.get("same_key_and_body"):
        assert {(s["key"], s["body"]) for s in seen} == {(seen[0]["key"], seen[0]["body"])}
        assert seen[0]["key"] == '"' + case["call"]["key"] + '"'
    if "waits" in expect:
        waits = [int(parse_qs(urlsplit(s["target"]).query)["wait"][0]) for s in seen]
        assert waits == expect["waits"]
    assert elapsed_ms >= expect.get("min_elapsed_ms", 0)
