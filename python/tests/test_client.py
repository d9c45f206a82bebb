"""The HTTP client against `oncebox serve`: retries keep the key and the bytes, refusals are
never retried, long-polls wait for the outcome."""

from __future__ import annotations

import asyncio
from urllib.parse import urlparse

import httpx
import psycopg
import pytest

import oncebox
from conftest import Services
from proxy import LossyProxy

INVOICE = {"order_id": "order-1", "amount": "1.00"}


def intents(db_url: str) -> int:
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT count(*) FROM oncebox.intents").fetchone()
        assert row is not None
        return int(row[0])


def upstream(url: str) -> tuple[str, int]:
    parsed = urlparse(url)
    assert parsed.hostname is not None
    assert parsed.port is not None
    return parsed.hostname, parsed.port


def test_an_answer_lost_after_the_commit_still_makes_one_intent(services: Services) -> None:
    services.serve()
    proxy = LossyProxy(upstream(services.api_url), drop=2)
    retry = oncebox.RetryConfig(max_attempts=5, min_delay=0.01, max_delay=0.05)
    with oncebox.Client(proxy.url, services.token("acme"), retry=retry) as client:
        s = client.submit("lost-answer", "create_invoice", INVOICE)
    proxy.close()
    assert proxy.dropped == 2, "two answers were lost after the server committed"
    assert proxy.connections == 3
    assert not s.created, "the third try found the intent the first one made"
    assert s.intent.idempotency_key == "lost-answer"
    assert intents(services.db_url) == 1


def test_when_every_answer_is_lost_the_error_says_so_and_a_resubmit_finds_the_intent(
    services: Services,
) -> None:
    services.serve()
    proxy = LossyProxy(upstream(services.api_url), drop=3)
    retry = oncebox.RetryConfig(max_attempts=3, min_delay=0.01, max_delay=0.05)
    token = services.token("acme")
    with (
        oncebox.Client(proxy.url, token, retry=retry) as client,
        pytest.raises(oncebox.TransportError) as e,
    ):
        client.submit("k", "create_invoice", INVOICE)
    assert e.value.attempts == 3
    with oncebox.Client(services.api_url, token) as client:
        again = client.submit("k", "create_invoice", INVOICE)
    assert not again.created
    assert intents(services.db_url) == 1


def test_refusals_raise_api_error_naming_the_field_and_are_not_retried(
    services: Services,
) -> None:
    services.serve()
    with oncebox.Client(services.api_url, services.token("acme")) as client:
        with pytest.raises(oncebox.ApiError) as e:
            client.submit("k1", "create_invoice", {"amount": 2**60})
        assert (e.value.status, e.value.field) == (400, "arguments/amount")
        with pytest.raises(oncebox.ApiError) as e:
            client.submit("k2", "refund", INVOICE)
        assert e.value.status == 422
        assert e.value.field == "action"
        client.submit("k3", "create_invoice", INVOICE)
        with pytest.raises(oncebox.ApiError) as e:
            client.submit("k3", "create_invoice", {"other": 1})
        assert e.value.status == 422
        assert e.value.field is not None
        with pytest.raises(oncebox.ApiError) as e:
            client.get("nope")
        assert e.value.status == 404
        with pytest.raises(oncebox.InvalidIntent) as bad:
            client.submit("has space", "create_invoice", INVOICE)
        assert bad.value.field == "idempotency_key"
    with (
        oncebox.Client(services.api_url, "wrong-token") as client,
        pytest.raises(oncebox.ApiError) as e,
    ):
        client.get("k3")
    assert e.value.status == 401
    assert intents(services.db_url) == 1


def test_429_and_5xx_are_retried_with_the_same_bytes_honouring_retry_after() -> None:
    seen: list[tuple[str | None, bytes]] = []
    answers = [
        httpx.Response(429, headers={"retry-after": "0"}, json=_problem(429)),
        httpx.Response(503, json=_problem(503)),
        httpx.Response(202, json=_intent("k")),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.headers.get("idempotency-key"), request.read()))
        return answers.pop(0)

    retry = oncebox.RetryConfig(max_attempts=3, min_delay=0.001, max_delay=0.01)
    with oncebox.Client(
        "http://oncebox.test", "t", retry=retry, transport=httpx.MockTransport(handler)
    ) as client:
        s = client.submit("k", "create_invoice", INVOICE)
    assert s.created
    assert len(seen) == 3
    assert {h for h, _ in seen} == {'"k"'}
    assert len({b for _, b in seen}) == 1, "every try sends the same bytes"

    def refuse(request: httpx.Request) -> httpx.Response:
        seen.append((request.headers.get("idempotency-key"), request.read()))
        return httpx.Response(400, json={**_problem(400), "field": "arguments/amount"})

    seen.clear()
    with (
        oncebox.Client(
            "http://oncebox.test", "t", retry=retry, transport=httpx.MockTransport(refuse)
        ) as client,
        pytest.raises(oncebox.ApiError) as e,
    ):
        client.submit("k", "create_invoice", INVOICE)
    assert (e.value.status, e.value.field) == (400, "arguments/amount")
    assert len(seen) == 1, "a refusal is not retried"


def test_wait_returns_when_settled_and_cancel_is_safe_to_retry(services: Services) -> None:
    services.serve()
    token = services.token("acme")
    with oncebox.Client(services.api_url, token) as client:
        client.submit("to-cancel", "create_invoice", INVOICE)
        cancelled = client.cancel("to-cancel")
        assert cancelled.status is oncebox.Status.CANCELLED
        assert client.cancel("to-cancel").status is oncebox.Status.CANCELLED
        waited = client.wait("to-cancel", timeout=5)
        assert waited.is_settled
        client.submit("pending", "create_invoice", INVOICE)
        still = client.wait("pending", timeout=1)
        assert still.status is oncebox.Status.PENDING
        assert not still.is_settled


def test_the_async_client(services: Services) -> None:
    services.serve()
    token = services.token("acme")

    async def main() -> None:
        async with oncebox.AsyncClient(services.api_url, token) as client:
            s = await client.submit(
                "async", "create_invoice", INVOICE, run_id="r", step="1", ordering_key="acct-1"
            )
            assert s.intent.ordering_key == "acct-1", "the ordering key travels and comes back"
            assert s.created
            assert s.intent.run_id == "r"
            got = await client.get("async")
            assert got.request_hash == s.intent.request_hash
            assert (await client.cancel("async")).status is oncebox.Status.CANCELLED
            with pytest.raises(oncebox.ApiError) as e:
                await client.submit("async2", "refund", INVOICE)
            assert e.value.field == "action"

    asyncio.run(main())
    assert intents(services.db_url) == 1


def _problem(status: int) -> dict[str, object]:
    return {"status": status, "title": "busy", "detail": "try again"}


def _intent(key: str) -> dict[str, object]:
    return {
        "idempotency_key": key,
        "action": "create_invoice",
        "status": "pending",
        "request_hash": "0" * 64,
        "attempt_count": 0,
        "created_at": "2026-12-01T03:28:46.123456789Z",
        "updated_at": "2026-12-01T03:28:46Z",
    }
