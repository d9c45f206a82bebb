"""Intents written from Python are delivered by the Rust workers: one effect each at the
reference receiver."""

from __future__ import annotations

import time

import psycopg

import oncebox
from conftest import REDACTION_KEYS, Services


def test_intents_from_python_are_delivered_once_each(services: Services) -> None:
    services.receiver()
    assert services.config is not None
    intake = oncebox.Intake(oncebox.Config.load(services.config), REDACTION_KEYS)
    keys = [f"py-{n}" for n in range(20)]
    with psycopg.connect(services.db_url) as conn:
        for n, key in enumerate(keys):
            oncebox.submit(
                conn,
                tenant="acme",
                key=key,
                action="create_invoice",
                arguments={"order_id": key, "amount": f"{n}.00"},
                config=intake,
            )
        conn.commit()
        # A replay of every one before the workers start: still one intent each.
        for n, key in enumerate(keys):
            s = oncebox.submit(
                conn,
                tenant="acme",
                key=key,
                action="create_invoice",
                arguments={"order_id": key, "amount": f"{n}.00"},
                config=intake,
            )
            assert not s.created
        conn.commit()
    services.worker()
    deadline = time.monotonic() + 60
    statuses: dict[str, str] = {}
    while time.monotonic() < deadline:
        with psycopg.connect(services.db_url) as conn:
            statuses = dict(
                conn.execute("SELECT idempotency_key, status::text FROM oncebox.intents").fetchall()
            )
        if statuses and all(s == "succeeded" for s in statuses.values()):
            break
        time.sleep(0.1)
    assert sorted(statuses) == sorted(keys)
    assert set(statuses.values()) == {"succeeded"}, services.log("worker")[-2000:]
    assert [services.effects(k) for k in keys] == [1] * len(keys)
