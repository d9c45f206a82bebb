"""Real services for the Python tests: a fresh Postgres database per test (migrated by the Rust
binary), and the Rust processes (`oncebox receiver`, `worker`, `serve`) where a test needs them.

The binary is ``$ONCEBOX_BIN`` or the workspace's ``target/debug/oncebox`` (built by the
README's test command before pytest runs).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

import oncebox

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("ONCEBOX_BIN", ROOT / "target" / "debug" / "oncebox"))
BASE_URL = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
#: A redaction key for the tests' hashing rules (32 bytes of secret at least).
REDACTION_KEYS = "k1:" + "s" * 32


def config_toml(receiver: str = "http://127.0.0.1:9/invoices") -> str:
    """The tests' configuration: an honest destination, one that redacts, one that never
    re-sends (an unknown outcome there needs a person)."""
    return f"""
[actions.create_invoice]
destination = "billing"
[actions.create_invoice.tool]
description = "Create the invoice for an order, once."
destructive = false

[actions.charge_card]
destination = "billing"
redact = [{{ pointer = "/card", mode = "hash" }}, {{ pointer = "/cvv", mode = "drop" }}]

[actions.wire_transfer]
destination = "bank"

[actions.pay_out]
destination = "billing"
tool = {{ description = "Pay money out to a customer, once." }}
[actions.pay_out.arguments_schema]
type = "object"
required = ["amount"]
properties.amount = {{ type = "string", pattern = "^[0-9]+[.][0-9]{{2}}$" }}

[destinations.billing]
kind = "http"
url = "{receiver}"
idempotency = "key"
retry = {{ max_attempts = 3, initial_delay = "20ms", max_delay = "50ms" }}

[destinations.bank]
kind = "http"
url = "{receiver}"
idempotency = "none"
timeout = "2s"
"""


#: An action whose refunds of 1,000 or more wait for two people (appended to a test's
#: configuration by ``with_refund_policy``).
REFUND_POLICY = """
[actions.refund]
destination = "billing"
tool = { description = "Refund an order, once. Large refunds wait for two people." }
[actions.refund.approval]
approvals = 2
[actions.refund.approval.when]
type = "object"
required = ["amount"]
properties.amount = { decimalMinimum = "1000" }
"""


def with_refund_policy(config: Path) -> Path:
    """``config`` with the ``refund`` action of ``REFUND_POLICY`` added to it."""
    config.write_text(config.read_text() + REFUND_POLICY)
    return config


@pytest.fixture(scope="session")
def oncebox_bin() -> Path:
    if not BIN.is_file():
        pytest.fail(f"{BIN} is missing: build it with `cargo build -p oncebox` (scripts/test.sh)")
    return BIN


@pytest.fixture
def db_url(oncebox_bin: Path) -> Iterator[str]:
    """A new database, migrated by `oncebox migrate`, dropped afterwards."""
    name = f"pyt_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(BASE_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = BASE_URL.rsplit("/", 1)[0] + "/" + name
    subprocess.run([oncebox_bin, "migrate", "--database-url", url], check=True, capture_output=True)
    try:
        yield url
    finally:
        with psycopg.connect(BASE_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "oncebox.toml"
    path.write_text(config_toml())
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    """Until something accepts on ``port`` (or the process died, or 30 s passed)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port} within 30 s")


@dataclass
class Services:
    """The Rust processes a test runs against, stopped at the end of the test."""

    bin: Path
    db_url: str
    tmp: Path
    procs: list[subprocess.Popen[bytes]]
    receiver_url: str = ""
    api_url: str = ""
    config: Path | None = None
    issued: int = 0

    def start(self, args: list[str], port: int, what: str) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"{what}.log").open("wb")
        # Everything the binary logs, down to each delivery: what a test reads in a log (and
        # what must never be there) is all there is to read.
        env = {**os.environ, "ONCEBOX_REDACTION_KEYS": REDACTION_KEYS, "ONCEBOX_LOG": "debug"}
        proc = subprocess.Popen(
            [str(self.bin), *args], stdout=log, stderr=subprocess.STDOUT, env=env
        )
        self.procs.append(proc)
        if port:
            wait_for_port(port, proc, what)
        return proc

    def receiver(self) -> str:
        port = free_port()
        self.start(["receiver", "--listen", f"127.0.0.1:{port}"], port, "receiver")
        self.receiver_url = f"http://127.0.0.1:{port}"
        self.config = self.tmp / "services.toml"
        self.config.write_text(config_toml(self.receiver_url + "/invoices"))
        return self.receiver_url

    def worker(self) -> subprocess.Popen[bytes]:
        assert self.config is not None, "start the receiver first"
        port = free_port()
        return self.start(
            [
                "worker",
                "--database-url",
                self.db_url,
                "--config",
                str(self.config),
                "--metrics-addr",
                f"127.0.0.1:{port}",
                "--poll-interval",
                "100ms",
            ],
            port,
            "worker",
        )

    def serve(self, *extra: str, port: int = 0) -> str:
        """Starts `oncebox serve` (on ``port``, or a free one) with ``extra`` flags."""
        return self.serve_proc(*extra, port=port)[0]

    def serve_proc(self, *extra: str, port: int = 0) -> tuple[str, subprocess.Popen[bytes]]:
        config = self.config or self.tmp / "serve.toml"
        if self.config is None:
            config.write_text(config_toml())
        port = port or free_port()
        args = ["serve", "--database-url", self.db_url, "--config", str(config)]
        proc = self.start([*args, "--listen", f"127.0.0.1:{port}", *extra], port, "serve")
        self.api_url = f"http://127.0.0.1:{port}"
        return self.api_url, proc

    def token(
        self, tenant: str, role: str = "agent", holder: str | None = None, label: str | None = None
    ) -> str:
        """A new API token of ``tenant`` with ``role`` (agent or ops), issued to ``holder`` (an
        ops token without one gets a holder of its own, ``ops-N@TENANT``)."""
        if holder is None and role == "ops":
            self.issued += 1
            holder = f"ops-{self.issued}@{tenant}"
        args = ["ops", "token", "create", "--tenant", tenant, "--role", role]
        args += [] if holder is None else ["--holder", holder]
        args += [] if label is None else ["--label", label]
        out = subprocess.run(
            [str(self.bin), *args],
            env={**os.environ, "DATABASE_URL": self.db_url},
            check=True,
            capture_output=True,
        )
        return out.stdout.decode().strip()

    def decide(self, token: str, *args: str) -> subprocess.CompletedProcess[bytes]:
        """``oncebox ops ARGS`` (approve or reject) through the API ``serve`` started, with
        ``token`` as the operator's own (not checked: the caller reads it)."""
        assert self.api_url, "serve() first"
        return subprocess.run(
            [str(self.bin), "ops", *args, "--api", self.api_url],
            env={**os.environ, "ONCEBOX_TOKEN": token},
            capture_output=True,
        )

    def config_file(self) -> Path:
        """The configuration the services run with (one pointing nowhere before `receiver`)."""
        if self.config is None:
            self.config = self.tmp / "oncebox.toml"
            self.config.write_text(config_toml())
        return self.config

    def effects(self, key: str, tenant: str = "acme") -> int:
        """How many effects the reference receiver executed for ``tenant``'s intent ``key``
        (under its delivery key, which is what the receiver sees)."""
        import httpx

        params = {"key": oncebox.delivery_key(tenant, key)}
        body = httpx.get(f"{self.receiver_url}/effects", params=params).json()
        return len(body["data"])

    def log(self, what: str) -> str:
        return (self.tmp / f"{what}.log").read_text(errors="replace")


@pytest.fixture
def services(oncebox_bin: Path, db_url: str, tmp_path: Path) -> Iterator[Services]:
    s = Services(oncebox_bin, db_url, tmp_path, [])
    try:
        yield s
    finally:
        for proc in reversed(s.procs):
            proc.terminate()
        for proc in s.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
