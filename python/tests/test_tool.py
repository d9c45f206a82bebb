"""The idempotent tool wrapper: a retried call returns the recorded outcome and never makes a
second effect; every ending other than success is its own exception."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from urllib.parse import urlparse

import pytest

import oncebox
from conftest import REDACTION_KEYS, Services
from proxy import LossyProxy


def test_called_twice_after_a_lost_answer_the_wrapper_makes_one_effect(
    services: Services,
) -> None:
    services.receiver()
    services.worker()
    api = urlparse(services.serve())
    assert api.hostname is not None
    assert api.port is not None
    proxy = LossyProxy((api.hostname, api.port), drop=1)
    once = oncebox.RetryConfig(max_attempts=1)
    client = oncebox.Client(proxy.url, services.token("acme"), retry=once)

    @oncebox.tool("create_invoice", via=client, timeout=30)
    def create_invoice(order_id: str, amount: str) -> Mapping[str, str]:
        return {"order_id": order_id, "amount": amount}

    # The agent's first call: the server committed, the answer was lost on the way back.
    with pytest.raises(oncebox.TransportError):
        create_invoice("session-1", 4, order_id="order-9", amount="12.50")
    # The agent retries the same step: same key, the recorded outcome, no second effect.
    intent = create_invoice("session-1", 4, order_id="order-9", amount="12.50")
    assert intent.status is oncebox.Status.SUCCEEDED
    assert intent.response is not None, "the receiver's answer"
    key = create_invoice.key("session-1", 4, order_id="order-9", amount="12.50")
    assert intent.idempotency_key == key
    assert (intent.run_id, intent.step) == ("session-1", "4")
    again = create_invoice("session-1", 4, order_id="order-9", amount="12.50")
    assert again.response == intent.response
    assert services.effects(key) == 1
    # Another step is another intent.
    other = create_invoice("session-1", 5, order_id="order-9", amount="12.50")
    assert other.idempotency_key != key
    client.close()
    proxy.close()


def test_in_a_transaction_of_its_own_twice_is_one_effect(services: Services) -> None:
    services.receiver()
    services.worker()
    assert services.config is not None
    via = oncebox.Database(
        services.db_url,
        tenant="acme",
        config=oncebox.Intake(oncebox.Config.load(services.config), REDACTION_KEYS),
    )

    @oncebox.tool("charge_card", via=via, timeout=30)
    def charge(card: str, amount: str) -> Mapping[str, str]:
        return {"card": card, "amount": amount}

    first = charge("s", 1, card="4111111111111111", amount="5.00")
    second = charge("s", 1, card="4111111111111111", amount="5.00")
    assert first.status is oncebox.Status.SUCCEEDED
    assert second.id == first.id
    assert first.payload is not None
    assert first.payload["card"].startswith("hmac-sha256:")
    assert services.effects(first.idempotency_key) == 1


def test_every_other_ending_is_a_distinct_exception(services: Services) -> None:
    services.receiver()
    assert services.config is not None
    via = oncebox.Database(
        services.db_url,
        tenant="acme",
        config=oncebox.Intake(oncebox.Config.load(services.config), REDACTION_KEYS),
    )

    @oncebox.tool("create_invoice", via=via, timeout=0.5)
    def invoice(order_id: str, faults: list[str]) -> Mapping[str, object]:
        return {"order_id": order_id, "faults": faults}

    @oncebox.tool("wire_transfer", via=via, timeout=30)
    def wire(order_id: str, faults: list[str]) -> Mapping[str, object]:
        return {"order_id": order_id, "faults": faults}

    # No worker yet: the wait runs out, the intent is still pending.
    with pytest.raises(oncebox.WaitTimeout) as timeout:
        invoice("s", 1, order_id="o1", faults=[])
    assert timeout.value.intent.status is oncebox.Status.PENDING
    # Cancelled by an operator before a worker sent it.
    with pytest.raises(oncebox.WaitTimeout):
        invoice("s", 2, order_id="o2", faults=[])
    subprocess.run(
        [
            str(services.bin),
            "ops",
            "cancel",
            "--tenant",
            "acme",
            invoice.key("s", 2, order_id="o2", faults=[]),
            "--actor",
            "t",
        ],
        env={"DATABASE_URL": services.db_url, "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
    )
    with pytest.raises(oncebox.IntentCancelled):
        invoice("s", 2, order_id="o2", faults=[])

    services.worker()
    # A permanent refusal by the receiver: failed for good.
    with pytest.raises(oncebox.IntentFailed) as failed:
        wire("s", 3, order_id="o3", faults=["422"])
    assert failed.value.intent.status is oncebox.Status.FAILED
    # The request left and its answer was lost at a destination that cannot be asked or re-sent
    # to: a person must decide.
    with pytest.raises(oncebox.NeedsReview) as review:
        wire("s", 4, order_id="o4", faults=["drop"])
    assert review.value.intent.status is oncebox.Status.NEEDS_REVIEW


def older_than(db_url: str, key: str, seconds: float) -> None:
    """Waits until the intent under ``key`` is more than ``seconds`` old (by the database)."""
    import time

    import psycopg

    with psycopg.connect(db_url, autocommit=True) as conn:
        for _ in range(100):
            row = conn.execute(
                "SELECT now() - created_at > make_interval(secs => %s) FROM oncebox.intents"
                " WHERE idempotency_key = %s",
                (seconds, key),
            ).fetchone()
            if row is not None and row[0]:
                return
            time.sleep(0.1)
    raise AssertionError(f"{key} never got older than {seconds} s")


def test_once_is_one_intent_per_identity_within_the_window(services: Services) -> None:
    services.receiver()
    services.worker()
    client = oncebox.Client(services.serve(), services.token("acme"))

    @oncebox.tool("create_invoice", via=client, timeout=30)
    def create_invoice(order_id: str, amount: str) -> Mapping[str, str]:
        return {"order_id": order_id, "amount": amount}

    # No run: the call is its arguments. Called again (a lost answer, a restarted agent), it is
    # the same intent, with its outcome.
    first = create_invoice.once(order_id="o-1", amount="1.00")
    again = create_invoice.once(order_id="o-1", amount="1.00")
    assert first.status is oncebox.Status.SUCCEEDED
    assert again.idempotency_key == first.idempotency_key
    assert again.response == first.response
    assert first.idempotency_key.startswith("call-")
    assert (first.run_id, first.step) == (None, None)
    assert services.effects(first.idempotency_key) == 1
    other = create_invoice.once(order_id="o-2", amount="1.00")
    assert other.idempotency_key != first.idempotency_key

    # Identified by its order alone for one second: after that, the same call is a new intent.
    @oncebox.tool("create_invoice", via=client, timeout=30, key=["/order_id"], dedupe_window=1.0)
    def by_order(order_id: str, amount: str) -> Mapping[str, str]:
        return {"order_id": order_id, "amount": amount}

    a = by_order.once(order_id="o-3", amount="1.00")
    older_than(services.db_url, a.idempotency_key, 1.0)
    b = by_order.once(order_id="o-3", amount="1.00")
    assert b.idempotency_key != a.idempotency_key
    assert services.effects(a.idempotency_key) == services.effects(b.idempotency_key) == 1

    # In a transaction of its own, identified by the configuration's tool section (all the
    # arguments, a day, as the MCP gateway identifies a call): the same intent as over HTTP.
    assert services.config is not None
    via = oncebox.Database(
        services.db_url,
        tenant="acme",
        config=oncebox.Intake(oncebox.Config.load(services.config), REDACTION_KEYS),
    )

    @oncebox.tool("create_invoice", via=via, timeout=30)
    def in_db(order_id: str, amount: str) -> Mapping[str, str]:
        return {"order_id": order_id, "amount": amount}

    assert in_db.once(order_id="o-1", amount="1.00").idempotency_key == first.idempotency_key
    client.close()
