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
