"""What the package says about statuses, endings and defaults is what the core knows (the native
module's facts), and the core's statuses are the database's."""

from __future__ import annotations

import ast
from pathlib import Path

import psycopg
import pytest

import oncebox
from oncebox import _native
from oncebox._errors import ENDING_ERRORS
from oncebox.client import Client, RetryConfig
from oncebox.tool import outcome


def test_statuses_are_the_databases(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT enum_range(NULL::oncebox.intent_status)::text[]").fetchone()
    assert row is not None
    assert [s.value for s in oncebox.Status] == row[0]
    assert all(isinstance(s, str) for s in oncebox.Status)
    assert oncebox.Status("succeeded") is oncebox.Status.SUCCEEDED


def test_the_sets_and_endings_are_the_cores() -> None:
    assert {"succeeded", "failed", "cancelled", "expired", "rejected"} == oncebox.TERMINAL
    assert oncebox.SETTLED == oncebox.TERMINAL | oncebox.WAITING_FOR_A_PERSON
    assert {"needs_review", "awaiting_approval"} == oncebox.WAITING_FOR_A_PERSON
    # Every ending the core names has its class here, exported, and nothing else is one.
    assert {e.error for e in _native.ENDINGS.values()} == set(ENDING_ERRORS)
    for name, error in ENDING_ERRORS.items():
        assert getattr(oncebox, name) is error
        assert issubclass(error, oncebox.NotSucceeded)
    assert set(_native.ENDINGS) == {s.value for s in oncebox.Status} - {"succeeded"}


@pytest.mark.parametrize("status", list(oncebox.Status), ids=lambda s: s.value)
def test_each_ending_raises_the_class_and_message_the_core_names(status: oncebox.Status) -> None:
    intent = oncebox.Intent.from_api(
        {
            "idempotency_key": "k",
            "action": "a",
            "status": status.value,
            "request_hash": "h",
            "attempt_count": 1,
            "error": {"detail": "402 refused"},
            "created_at": "2026-12-01T00:00:00Z",
        }
    )
    ending = _native.ENDINGS.get(status.value)
    if ending is None:
        assert outcome(intent) is intent
        return
    with pytest.raises(ENDING_ERRORS[ending.error]) as raised:
        outcome(intent)
    message = ending.message.replace("{status}", status.value)
    if ending.with_detail:
        message += ": 402 refused"
    assert str(raised.value) == f"intent 'k' (a): {message}"


def test_the_client_defaults_are_the_cores() -> None:
    d = _native.CLIENT_DEFAULTS
    retry = RetryConfig()
    assert (retry.max_attempts, retry.min_delay, retry.max_delay) == (
        d.attempts,
        d.min_delay,
        d.max_delay,
    )
    assert (d.attempts, d.min_delay, d.max_delay, d.timeout, d.max_wait) == (6, 0.1, 5.0, 30.0, 60)
    with Client("http://127.0.0.1:9", "t") as client:
        assert client.timeout == d.timeout


def test_the_submit_parameters_are_the_statements() -> None:
    """Each list names as many parameters as its statement takes, the ordered one the lane's
    first."""
    for names, text in (
        (_native.SUBMIT_PARAMS, _native.SUBMIT),
        (_native.SUBMIT_ORDERED_PARAMS, _native.SUBMIT_ORDERED),
    ):
        assert f"${len(names)}" in text
        assert f"${len(names) + 1}" not in text
    assert _native.SUBMIT_ORDERED_PARAMS[:4] == (
        "tenant",
        "ordering_key",
        "destination",
        "skip_failed",
    )


def test_the_stubs_statuses_are_the_modules() -> None:
    """stubtest finds a member missing from the stub, not a value spelled otherwise: the stub's
    members and values, read as source, are the native module's."""
    stub = Path(_native.__file__).with_name("_native.pyi")
    tree = ast.parse(stub.read_text(encoding="utf-8"))
    (status,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Status"]
    members = {
        node.targets[0].id: node.value.value
        for node in status.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant)
    }
    assert members == {s.name: s.value for s in oncebox.Status}
