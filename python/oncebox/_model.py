"""What oncebox returns: the intent under a key, and whether a submit created it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from . import _native

#: Where an intent stands: the journal's statuses, a ``str`` enum made by the native module
#: from oncebox-core's list (``Status.SUCCEEDED == "succeeded"``).
Status = _native.Status

#: The statuses that never change again (from the core).
TERMINAL: frozenset[Status] = _native.TERMINAL
#: Terminal, or waiting for a person: nothing more happens by itself (from the core).
SETTLED: frozenset[Status] = _native.SETTLED
#: The statuses only a person moves on (from the core).
WAITING_FOR_A_PERSON: frozenset[Status] = _native.WAITING_FOR_A_PERSON


@dataclass(frozen=True)
class Intent:
    """One intent, as the journal (in-transaction submit) or the HTTP API shows it.

    ``id``, ``tenant_id`` and ``payload`` are known only when read from the database.
    """

    idempotency_key: str
    action: str
    status: Status
    request_hash: str
    attempt_count: int
    external_reference: str | None
    response: Any
    error: dict[str, Any] | None
    business_ref: str | None
    run_id: str | None
    step: str | None
    deadline: datetime | None
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None
    id: int | None = None
    tenant_id: str | None = None
    payload: dict[str, Any] | None = None
    ordering_key: str | None = None

    @property
    def is_settled(self) -> bool:
        """Terminal, or waiting for a person."""
        return self.status in SETTLED

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Intent:
        """An intent from a row of ``oncebox.intents``."""
        return cls(
            idempotency_key=row["idempotency_key"],
            action=row["action"],
            status=Status(row["status"]),
            request_hash=row["request_hash"],
            attempt_count=row["attempt_count"],
            external_reference=row["external_reference"],
            response=row["response"],
            error=row["last_error"],
            business_ref=row["business_ref"],
            run_id=row["run_id"],
            step=row["step"],
            deadline=row["deadline"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            completed_at=row["completed_at"],
            id=row["id"],
            tenant_id=row["tenant_id"],
            payload=row["payload"],
            ordering_key=row.get("ordering_key"),
        )

    @classmethod
    def from_api(cls, body: Mapping[str, Any]) -> Intent:
        """An intent from the HTTP API's JSON."""

        def when(name: str) -> datetime | None:
            value = body.get(name)
            return None if value is None else _parse_time(value)

        created = _parse_time(body["created_at"])
        return cls(
            idempotency_key=body["idempotency_key"],
            action=body["action"],
            status=Status(body["status"]),
            request_hash=body["request_hash"],
            attempt_count=int(body["attempt_count"]),
            external_reference=body.get("external_reference"),
            response=body.get("response"),
            error=body.get("error"),
            business_ref=body.get("business_ref"),
            run_id=body.get("run_id"),
            step=body.get("step"),
            deadline=when("deadline"),
            created_at=created,
            updated_at=when("updated_at") or created,
            completed_at=when("completed_at"),
            ordering_key=body.get("ordering_key"),
        )


@dataclass(frozen=True)
class Submitted:
    """What a submit returns: the intent that owns the key, and whether this call created it.

    After a lost answer and a retry ``created`` is false even if the first try created it: the
    key, not this flag, is what makes the submit safe.
    """

    intent: Intent
    created: bool


_FRACTION = re.compile(r"\.(\d+)")


def _parse_time(text: str) -> datetime:
    """RFC 3339 as the API writes it (``2026-12-01T03:28:46.123456789Z``), to the microsecond.

    Python 3.10's ``fromisoformat`` takes only 3 or 6 fraction digits and no ``Z``.
    """
    text = text.replace("Z", "+00:00").replace("z", "+00:00")
    text = _FRACTION.sub(lambda m: "." + (m.group(1) + "000000")[:6], text, count=1)
    return datetime.fromisoformat(text)
