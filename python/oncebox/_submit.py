"""In-transaction submit: the journal row and its outbox row written in the caller's own open
transaction, with the statement text of the Rust store (``oncebox-sql``), so that both
languages write identical rows.

``submit`` takes a psycopg 3 ``Connection``, or a SQLAlchemy 2 ``Connection`` or ``Session``
over the psycopg driver (``postgresql+psycopg://``), whose DBAPI connection is the same psycopg
connection and so the same transaction; ``submit_async`` takes their async twins.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from . import _native
from ._errors import InvalidIntent, KeyConflict, OnceboxError
from ._intake import Config, Intake, Prepared
from ._model import Intent, Status, Submitted

if TYPE_CHECKING:
    import psycopg
    from sqlalchemy import Connection as SAConnection
    from sqlalchemy.ext.asyncio import AsyncConnection as SAAsyncConnection
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

    SyncConn = psycopg.Connection[Any] | SAConnection | Session
    AsyncConn = psycopg.AsyncConnection[Any] | SAAsyncConnection | AsyncSession

#: The statements, as the Rust store runs them and as psycopg takes them.
SUBMIT: str = _native.SUBMIT
SUBMIT_PYFORMAT: str = _native.SUBMIT_PYFORMAT
SUBMIT_ORDERED_PYFORMAT: str = _native.SUBMIT_ORDERED_PYFORMAT
INTENT_BY_KEY_PYFORMAT: str = _native.INTENT_BY_KEY_PYFORMAT


def submit(
    conn: SyncConn,
    *,
    tenant: str,
    key: str,
    action: str,
    arguments: Mapping[str, Any],
    business_ref: str | None = None,
    run_id: str | None = None,
    step: str | None = None,
    deadline: datetime | None = None,
    config: Intake | Config,
    notify: bool = True,
    ordering_key: str | None = None,
    principal: str | None = None,
) -> Submitted:
    """Records an intent in the journal and the outbox inside the caller's open transaction.

    ``conn`` is a psycopg ``Connection`` or a SQLAlchemy ``Connection`` or ``Session`` over
    psycopg; for their async twins use ``submit_async``. Nothing is visible to workers until the
    caller commits, and nothing remains if it rolls back. The same key with the same request
    returns the existing intent (``created`` false); the same key with another request raises
    ``KeyConflict`` with both hashes and writes nothing; a bad field raises ``InvalidIntent``
    naming it, before any statement runs. Concurrent submits of one key wait for each other on
    the journal's unique index, so exactly one creates the intent (under ``REPEATABLE READ`` or
    ``SERIALIZABLE`` the others get a serialization failure: roll back and retry).

    On an autocommit psycopg connection outside ``conn.transaction()`` the intent commits by
    itself, statement by statement (as the Rust ``Intake::submit_alone``).
    ``notify`` wakes an idle worker at commit (as the Rust intake does by default).
    With ``ordering_key``, intents of the tenant to the same destination with the same key are
    delivered one at a time, in submit order (the submit holds the lane's lock until commit).
    ``principal`` names who submits (``user:NAME``) instead of the intake's principal; with
    neither, the database role is recorded (``db:ROLE``). The submitter may not approve it.
    """
    if _is_async(conn):
        raise TypeError(
            f"oncebox.submit takes a synchronous connection; for a {type(conn).__qualname__} "
            "use `await oncebox.submit_async(...)`"
        )
    call = _Call.prepare(
        tenant=tenant,
        key=key,
        action=action,
        arguments=arguments,
        business_ref=business_ref,
        run_id=run_id,
        step=step,
        deadline=deadline,
        config=config,
        ordering_key=ordering_key,
        principal=principal,
    )
    driver = _sync_driver(conn)
    with driver.cursor() as cur:
        cur.execute(call.statement(), call.params(notify))
        inserted = cur.fetchone()
    if inserted is not None:
        return call.created(inserted[0], inserted[1], inserted[2])
    with driver.cursor(row_factory=_dict_row()) as cur:
        cur.execute(INTENT_BY_KEY_PYFORMAT, {"p1": tenant, "p2": key})
        existing = cur.fetchone()
    return call.existing(existing)


async def submit_async(
    conn: AsyncConn,
    *,
    tenant: str,
    key: str,
    action: str,
    arguments: Mapping[str, Any],
    business_ref: str | None = None,
    run_id: str | None = None,
    step: str | None = None,
    deadline: datetime | None = None,
    config: Intake | Config,
    notify: bool = True,
    ordering_key: str | None = None,
    principal: str | None = None,
) -> Submitted:
    """``submit`` for a psycopg ``AsyncConnection`` or a SQLAlchemy ``AsyncConnection`` or
    ``AsyncSession`` over psycopg: the same rows, the same replays and refusals."""
    if not _is_async(conn):
        raise TypeError(
            "oncebox.submit_async takes a psycopg AsyncConnection or a SQLAlchemy "
            f"AsyncConnection or AsyncSession; got {type(conn).__qualname__} (for a synchronous "
            "connection use oncebox.submit)"
        )
    call = _Call.prepare(
        tenant=tenant,
        key=key,
        action=action,
        arguments=arguments,
        business_ref=business_ref,
        run_id=run_id,
        step=step,
        deadline=deadline,
        config=config,
        ordering_key=ordering_key,
        principal=principal,
    )
    driver = await _async_driver(conn)
    async with driver.cursor() as cur:
        await cur.execute(call.statement(), call.params(notify))
        inserted = await cur.fetchone()
    if inserted is not None:
        return call.created(inserted[0], inserted[1], inserted[2])
    async with driver.cursor(row_factory=_dict_row()) as cur:
        await cur.execute(INTENT_BY_KEY_PYFORMAT, {"p1": tenant, "p2": key})
        existing = await cur.fetchone()
    return call.existing(existing)


@dataclass(frozen=True)
class _Call:
    """One submit's inputs, validated, and how its answers become a ``Submitted``."""

    intake: Intake
    tenant: str
    key: str
    action: str
    prepared: Prepared
    business_ref: str | None
    run_id: str | None
    step: str | None
    deadline: datetime | None
    ordering_key: str | None
    submitter: str | None

    @staticmethod
    def prepare(
        *,
        tenant: str,
        key: str,
        action: str,
        arguments: Mapping[str, Any],
        business_ref: str | None,
        run_id: str | None,
        step: str | None,
        deadline: datetime | None,
        config: Intake | Config,
        ordering_key: str | None,
        principal: str | None = None,
    ) -> _Call:
        """Validates, redacts and hashes the intent (``InvalidIntent`` before any statement)."""
        intake = config if isinstance(config, Intake) else config.intake()
        prepared = intake.prepare(
            tenant=tenant,
            key=key,
            action=action,
            arguments=arguments,
            business_ref=business_ref,
            run_id=run_id,
            step=step,
            ordering_key=ordering_key,
        )
        if deadline is not None and deadline.utcoffset() is None:
            raise InvalidIntent("deadline", "must be timezone-aware (datetime.now(timezone.utc))")
        return _Call(
            intake,
            tenant,
            key,
            action,
            prepared,
            business_ref,
            run_id,
            step,
            deadline,
            ordering_key,
            intake.principal if principal is None else _native.principal(principal),
        )

    def statement(self) -> str:
        """The submit statement: the ordered one when the intent joins a lane."""
        return SUBMIT_PYFORMAT if self.ordering_key is None else SUBMIT_ORDERED_PYFORMAT

    def params(self, notify: bool) -> dict[str, Any]:
        """The submit statement's parameters (``p1``, ``p2``…), filled by the names the core
        lists them in their order (``SUBMIT_PARAMS``; ``SUBMIT_ORDERED_PARAMS`` for an intent
        with an ordering key): a name this package does not fill is an error here, not a
        shifted parameter.

        JSON goes as the Rust-made text: psycopg sends a ``str`` untyped, and the server reads
        it as the ``jsonb`` its column or cast asks for.
        """
        p = self.prepared
        values: dict[str, Any] = {
            "tenant": self.tenant,
            "key": self.key,
            "action": self.action,
            "request_hash": p.request_hash,
            "payload": p.payload_json,
            "business_ref": self.business_ref,
            "run_id": self.run_id,
            "step": self.step,
            "deadline": self.deadline,
            "delivery_arguments": p.arguments_json if p.redacted else None,
            "approvals": p.approvals,
            "approval_window": p.approval_window,
            "submitted_by": self.submitter,
            "notify": notify,
            "channel": _native.OUTBOX_CHANNEL,
        }
        names = _native.SUBMIT_PARAMS
        if self.ordering_key is not None:
            lane = self.intake.lane(self.action)
            values |= {
                "ordering_key": self.ordering_key,
                "destination": lane.destination,
                "skip_failed": lane.skip_failed,
            }
            names = _native.SUBMIT_ORDERED_PARAMS
        missing = [name for name in names if name not in values]
        if missing:
            raise OnceboxError(f"the submit statement takes parameters not filled: {missing}")
        return {f"p{n}": values[name] for n, name in enumerate(names, start=1)}

    def created(self, intent_id: int, created_at: datetime, status: str) -> Submitted:
        import json

        intent = Intent(
            idempotency_key=self.key,
            action=self.action,
            status=Status(status),
            request_hash=self.prepared.request_hash,
            attempt_count=0,
            external_reference=None,
            response=None,
            error=None,
            business_ref=self.business_ref,
            run_id=self.run_id,
            step=self.step,
            deadline=_to_micros(self.deadline),
            created_at=created_at,
            updated_at=created_at,
            completed_at=None,
            id=intent_id,
            tenant_id=self.tenant,
            payload=json.loads(self.prepared.payload_json),
            ordering_key=self.ordering_key,
        )
        return Submitted(intent, created=True)

    def existing(self, row: Mapping[str, Any] | None) -> Submitted:
        if row is None:
            raise OnceboxError(
                "the key's row conflicted on insert but is not visible to this transaction "
                "(REPEATABLE READ or SERIALIZABLE: roll back and retry)"
            )
        if not self.intake.is_replay(
            self.action, self.prepared, row["request_hash"], row["payload"]
        ):
            raise KeyConflict(self.key, row["id"], row["request_hash"], self.prepared.request_hash)
        return Submitted(Intent.from_row(row), created=False)


def _to_micros(when: datetime | None) -> datetime | None:
    """As Postgres stores it: UTC, to the microsecond (Python's own resolution)."""
    return None if when is None else when.astimezone(timezone.utc)


def _dict_row() -> Any:
    from psycopg.rows import dict_row

    return dict_row


def _module(conn: Any) -> str:
    return type(conn).__module__.split(".")[0]


def _is_async(conn: Any) -> bool:
    module = _module(conn)
    if module == "psycopg":
        import psycopg

        return isinstance(conn, psycopg.AsyncConnection)
    if module == "sqlalchemy":
        from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

        return isinstance(conn, AsyncConnection | AsyncSession)
    return False


def _sync_driver(conn: Any) -> psycopg.Connection[Any]:
    """The psycopg connection under ``conn`` (the same transaction)."""
    import psycopg

    if isinstance(conn, psycopg.Connection):
        return conn
    if _module(conn) == "sqlalchemy":
        from sqlalchemy import Connection
        from sqlalchemy.orm import Session

        if isinstance(conn, Session):
            conn = conn.connection()
        if isinstance(conn, Connection):
            driver = conn.connection.driver_connection
            if isinstance(driver, psycopg.Connection):
                return driver
            raise _not_psycopg(driver)
    raise TypeError(_UNSUPPORTED.format(type(conn).__qualname__))


async def _async_driver(conn: Any) -> psycopg.AsyncConnection[Any]:
    import psycopg

    if isinstance(conn, psycopg.AsyncConnection):
        return conn
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    if isinstance(conn, AsyncSession):
        conn = await conn.connection()
    if isinstance(conn, AsyncConnection):
        driver = (await conn.get_raw_connection()).driver_connection
        if isinstance(driver, psycopg.AsyncConnection):
            return driver
        raise _not_psycopg(driver)
    raise TypeError(_UNSUPPORTED.format(type(conn).__qualname__))


def _not_psycopg(driver: object) -> TypeError:
    return TypeError(
        f"SQLAlchemy's driver connection is a {type(driver).__qualname__}: oncebox submits "
        "through psycopg 3 (use a postgresql+psycopg:// URL)"
    )


_UNSUPPORTED = (
    "oncebox.submit takes a psycopg Connection or a SQLAlchemy Connection or Session, and "
    "oncebox.submit_async their async twins; got {}"
)
