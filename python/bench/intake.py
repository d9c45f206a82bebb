"""In-transaction intake from Python against the same two inserts sent raw by psycopg.

Each case runs ``--clients`` threads, each with its own psycopg connection, for ``--seconds``:

- ``oncebox``: ``BEGIN; oncebox.submit(...); COMMIT`` — validation, the request hash and the
  Rust store's statement, as an orchestrator runs it;
- ``raw``: ``BEGIN; <journal insert + outbox insert>; COMMIT`` — the same two rows into the
  same tables sent raw by psycopg, binding tenant, key, action, hash and payload
  (``raw_submit.sql`` beside this file): what using the binding costs over writing the rows by
  hand. The goal is 0.8x of it.
- ``baseline``: the Rust benchmark's raw statement (``crates/oncebox-bench/queries/
  raw_intake.sql``) on its minimal tables (``crates/oncebox-bench/baseline/setup.sql``): what
  oncebox's schema (its indexes, checks and columns) costs too, comparable with the Rust
  benchmark's "ratio oncebox / raw SQL".

The cases alternate for ``--rounds`` rounds in one scratch database; the ratios of medians are
printed (and, with ``--json``, one JSON object). Usage, from the repository's root::

    target/pyenv/bin/python python/bench/intake.py --clients 32 --seconds 10 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg

import oncebox

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "crates" / "oncebox-bench"
CONFIG = """
[actions.create_invoice]
destination = "billing"

[destinations.billing]
kind = "http"
url = "http://127.0.0.1:9/invoices"
idempotency = "key"
"""
ARGUMENTS = {"order_id": "order-8172", "amount": "12500.00", "currency": "RUB"}
#: What the raw case binds: a request hash and the payload as JSON text, computed once.
HASH = oncebox.request_hash("create_invoice", ARGUMENTS)
PAYLOAD = json.dumps(ARGUMENTS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=32, help="threads, one connection each")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each case")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both cases")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"),
        help="a server where a scratch database may be created (default: $DATABASE_URL)",
    )
    parser.add_argument(
        "--oncebox-bin",
        default=str(ROOT / "target" / "release" / "oncebox"),
        help="the binary that migrates the scratch database",
    )
    a = parser.parse_args()
    for name in ("clients", "rounds"):
        if getattr(a, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if a.seconds <= 0:
        parser.error("--seconds must be positive")

    name = f"oncebox_pybench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(a.database_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = a.database_url.rsplit("/", 1)[0] + "/" + name
    try:
        subprocess.run([a.oncebox_bin, "migrate", "--database-url", url], check=True)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute((BASELINE / "baseline" / "setup.sql").read_text())
        run(a, url)
    finally:
        with psycopg.connect(a.database_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run(a: argparse.Namespace, url: str) -> None:
    intake = oncebox.Intake(oncebox.Config.from_toml(CONFIG))
    text = (BASELINE / "queries" / "raw_intake.sql").read_text()
    # Its header comment names the placeholder too: drop comment lines before respelling it.
    body = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    baseline_sql = body.replace("$1", "%s")
    raw_sql = (Path(__file__).parent / "raw_submit.sql").read_text()
    ours: list[float] = []
    raw: list[float] = []
    base: list[float] = []
    for round_ in range(a.rounds):

        def submit(conn: psycopg.Connection[tuple[object, ...]], key: str) -> None:
            oncebox.submit(
                conn,
                tenant="tenant-42",
                key=key,
                action="create_invoice",
                arguments=ARGUMENTS,
                config=intake,
            )

        def insert(conn: psycopg.Connection[tuple[object, ...]], key: str) -> None:
            conn.execute(raw_sql, ("tenant-42", key, "create_invoice", HASH, PAYLOAD))

        def baseline(conn: psycopg.Connection[tuple[object, ...]], key: str) -> None:
            conn.execute(baseline_sql, (key,))

        ours.append(measure(url, a.clients, a.seconds, f"o{round_}", submit))
        raw.append(measure(url, a.clients, a.seconds, f"r{round_}", insert))
        base.append(measure(url, a.clients, a.seconds, f"b{round_}", baseline))
        if not a.json:
            print(
                f"round {round_ + 1}: oncebox {ours[-1]:.0f}/s, raw psycopg {raw[-1]:.0f}/s, "
                f"baseline tables {base[-1]:.0f}/s",
                flush=True,
            )
    ratio = statistics.median(ours) / statistics.median(raw)
    ratio_base = statistics.median(ours) / statistics.median(base)
    if a.json:
        print(
            json.dumps(
                {
                    "clients": a.clients,
                    "seconds": a.seconds,
                    "oncebox_per_second": ours,
                    "raw_per_second": raw,
                    "baseline_per_second": base,
                    "ratio_to_raw": round(ratio, 3),
                    "ratio_to_baseline": round(ratio_base, 3),
                }
            )
        )
    else:
        print(
            f"medians: oncebox {statistics.median(ours):.0f}/s, raw psycopg "
            f"{statistics.median(raw):.0f}/s, baseline tables {statistics.median(base):.0f}/s\n"
            f"ratio oncebox / raw psycopg (same rows): {ratio:.2f} (goal >= 0.8)\n"
            f"ratio oncebox / baseline tables: {ratio_base:.2f}"
        )


def measure(
    url: str,
    clients: int,
    seconds: float,
    tag: str,
    one: Callable[[psycopg.Connection[tuple[object, ...]], str], None],
) -> float:
    """Intents per second committed by ``clients`` threads calling ``one`` for ``seconds``."""
    counts = [0] * clients
    errors: list[BaseException] = []
    start = threading.Barrier(clients + 1)
    stop = threading.Event()

    def worker(n: int) -> None:
        try:
            with psycopg.connect(url) as conn:
                start.wait()
                i = 0
                while not stop.is_set():
                    one(conn, f"{tag}-{n}-{i}")
                    conn.commit()
                    i += 1
                counts[n] = i
        except BaseException as e:
            errors.append(e)
            start.abort()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    began = time.monotonic()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - began
    if errors:
        raise errors[0]
    return sum(counts) / elapsed


if __name__ == "__main__":
    main()
