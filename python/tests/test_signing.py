"""Standard Webhooks signatures on HTTP deliveries, checked by verifiers no one on the team wrote:
PyPI's ``standardwebhooks`` for ``v1`` (HMAC-SHA256, ``whsec_`` secrets) and ``cryptography``'s
Ed25519 for ``v1a`` (``standardwebhooks`` 1.1 verifies ``v1`` only). A real worker delivers to a
receiver written here that records every request exactly as received.

Three secrets sign at once — a new and an old ``whsec_`` (a rotation in progress) and a ``whsk_``
Ed25519 key — and each verifies on its own; ``webhook-id`` is the idempotency key and stays the
same on a retry; the lookup that follows a lost answer is signed too; a changed body fails.
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

import oncebox
from conftest import Services

NEW = "whsec_" + base64.b64encode(b"n" * 32).decode()
OLD = "whsec_" + base64.b64encode(b"o" * 32).decode()
SEED = b"e" * 32
ED = "whsk_" + base64.b64encode(SEED).decode()


@dataclass
class Seen:
    """A request as the receiver got it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Recorder:
    """What the receiver saw, and how it should answer each key's POSTs in turn."""

    seen: list[Seen] = field(default_factory=list)
    script: dict[str, list[str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def posts(self, key: str) -> list[Seen]:
        with self.lock:
            return [
                s for s in self.seen if s.method == "POST" and s.headers["idempotency-key"] == key
            ]

    def gets(self) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.method == "GET"]


@pytest.fixture
def receiver() -> Iterator[tuple[str, Recorder]]:
    recorder = Recorder()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def _record(self, body: bytes) -> Seen:
            seen = Seen(
                self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body
            )
            with recorder.lock:
                recorder.seen.append(seen)
            return seen

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen = self._record(body)
            key = seen.headers.get("idempotency-key", "")
            with recorder.lock:
                plan = recorder.script.get(key, [])
                answer = plan.pop(0) if plan else "ok"
            if answer == "drop":
                # Executed, answer lost: close without a word.
                self.close_connection = True
                self.connection.shutdown(2)
                return
            status = 503 if answer == "503" else 201
            out = json.dumps({"id": f"ref-{key}"}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def do_GET(self) -> None:
            self._record(b"")
            out = json.dumps({"data": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", recorder
    finally:
        server.shutdown()


def config(url: str) -> str:
    return f"""
[actions.create_invoice]
destination = "billing"

[actions.refund]
destination = "payments"

[destinations.billing]
kind = "http"
url = "{url}/invoices"
idempotency = "key"
retry = {{ max_attempts = 3, initial_delay = "20ms", max_delay = "50ms" }}
signing = {{ secrets = ["${{SIG_NEW}}", "${{SIG_OLD}}", "${{SIG_ED}}"] }}

[destinations.payments]
kind = "http"
url = "{url}/refunds"
idempotency = "lookup"
timeout = "2s"
consistency_window = "1h"
signing = {{ secrets = ["${{SIG_NEW}}"] }}
[destinations.payments.lookup]
url = "{url}/refunds?key={{key}}"
results_pointer = "/data"
"""


def wait_for(what: str, check: object) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def verify_ed25519(seen: Seen, body: bytes) -> bool:
    """The v1a signature of ``seen`` over ``body``, checked with cryptography's Ed25519."""
    public = Ed25519PrivateKey.from_private_bytes(SEED).public_key()
    content = (
        seen.headers["webhook-id"].encode()
        + b"."
        + seen.headers["webhook-timestamp"].encode()
        + b"."
        + body
    )
    for versioned in seen.headers["webhook-signature"].split(" "):
        scheme, b64 = versioned.split(",", 1)
        if scheme == "v1a":
            try:
                public.verify(base64.b64decode(b64), content)
                return True
            except Exception:
                return False
    return False


def test_deliveries_and_lookups_are_signed_for_standard_webhooks_verifiers(
    services: Services, receiver: tuple[str, Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, recorder = receiver
    monkeypatch.setenv("SIG_NEW", NEW)
    monkeypatch.setenv("SIG_OLD", OLD)
    monkeypatch.setenv("SIG_ED", ED)
    services.receiver_url = url
    services.config = services.tmp / "signing.toml"
    services.config.write_text(config(url))
    # The receiver knows each intent by its delivery key (the tenant's and the key).
    dk = {k: oncebox.delivery_key("acme", k) for k in ("inv-1", "inv-retry", "refund-lost")}
    recorder.script[dk["inv-retry"]] = ["503"]
    recorder.script[dk["refund-lost"]] = ["drop"]
    services.worker()
    base = services.serve()
    headers = {"Authorization": f"Bearer {services.token('acme')}"}
    intents = {
        "inv-1": {"action": "create_invoice", "arguments": {"order_id": "o-1"}},
        "inv-retry": {"action": "create_invoice", "arguments": {"order_id": "o-2"}},
        "refund-lost": {"action": "refund", "arguments": {"order_id": "o-3"}},
    }
    for key, body in intents.items():
        r = httpx.post(f"{base}/v1/intents", json=body, headers={**headers, "Idempotency-Key": key})
        assert r.status_code == 202, r.text

    wait_for("inv-1", lambda: len(recorder.posts(dk["inv-1"])) == 1)
    wait_for("the retry of inv-retry", lambda: len(recorder.posts(dk["inv-retry"])) == 2)
    wait_for("the lookup of refund-lost", lambda: len(recorder.gets()) >= 1)

    new, old = Webhook(NEW), Webhook(OLD)
    for key in ("inv-1", "inv-retry"):
        for seen in recorder.posts(dk[key]):
            assert seen.headers["webhook-id"] == dk[key] == seen.headers["idempotency-key"]
            sigs = seen.headers["webhook-signature"].split(" ")
            assert [s.split(",")[0] for s in sigs] == ["v1", "v1", "v1a"], sigs
            # Each key verifies on its own: a receiver mid-rotation trusts either.
            new.verify(seen.body, seen.headers)
            old.verify(seen.body, seen.headers)
            assert verify_ed25519(seen, seen.body)
            # The same signatures over another body, or from a stranger's secret, fail.
            tampered = seen.body.replace(b"o-", b"x-")
            with pytest.raises(WebhookVerificationError):
                new.verify(tampered, seen.headers)
            assert not verify_ed25519(seen, tampered)
            stranger = Webhook("whsec_" + base64.b64encode(b"s" * 32).decode())
            with pytest.raises(WebhookVerificationError):
                stranger.verify(seen.body, seen.headers)
    # A retry keeps its webhook-id (the delivery key).
    first, second = recorder.posts(dk["inv-retry"])
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == "acme:inv-retry"

    # The delivery whose answer was lost, and the lookup that followed, both signed.
    (lost,) = recorder.posts(dk["refund-lost"])
    new.verify(lost.body, lost.headers)
    lookup = recorder.gets()[0]
    assert lookup.path == "/refunds?key=acme%3Arefund-lost", lookup.path
    assert lookup.headers["webhook-id"] == "acme:refund-lost"
    assert lookup.headers["x-oncebox-tenant"] == "acme"
    new.verify(b"", lookup.headers, json_parse=False)
    assert lookup.headers["webhook-signature"].startswith("v1,")
    # No secret reached a log — a log that holds every delivery and lookup it made.
    worker_log = services.log("worker")
    for key in ("inv-1", "inv-retry", "refund-lost"):
        delivered = [line for line in worker_log.splitlines() if "delivered" in line]
        assert any(re.search(rf"\bkey={re.escape(dk[key])}\b", line) for line in delivered), key
    assert "reconciled" in worker_log, "the lookup is logged"
    for name in ("worker", "serve"):
        log = services.log(name)
        for secret in (NEW, OLD, ED):
            assert secret[6:] not in log, name
    assert os.environ["SIG_NEW"] == NEW
