"""The idempotent tool wrapper: "the agent retried and the customer was charged twice", solved.

A function decorated with ``@oncebox.tool("deduct_balance", via=...)`` maps the tool's
parameters to the action's arguments; calling it with the agent's ``session`` and ``step``
derives the key with ``step_key(session, step, action, arguments)``, submits the intent (over
HTTP or in a transaction of its own), waits for the outcome and returns the succeeded intent.
A retry of the same call — same session, step and arguments, after a lost answer or a crash —
finds the same intent and never makes a second effect. Every other ending raises: ``failed`` or
``expired`` as ``IntentFailed``, ``cancelled`` as ``IntentCancelled``, ``needs_review`` as
``NeedsReview``, and a wait that ran out as ``WaitTimeout``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol

from . import _native
from ._errors import IntentCancelled, IntentFailed, NeedsReview, WaitTimeout
from ._intake import Config, Intake
from ._keys import step_key
from ._model import Intent, Status

if TYPE_CHECKING:
    from .client import AsyncClient, Client

P = ParamSpec("P")


class Via(Protocol):
    """How a tool's intent travels: submit under a key, then wait until it is settled."""

    def run(
        self,
        key: str,
        action: str,
        arguments: Mapping[str, Any],
        session: str,
        step: int,
        timeout: float,
    ) -> Intent:
        """Submits (a replay returns the existing intent) and waits up to ``timeout`` seconds."""
        ...


class Http:
    """Over the HTTP API, with a ``Client`` (its retries keep the same key and bytes)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def run(
        self,
        key: str,
        action: str,
        arguments: Mapping[str, Any],
        session: str,
        step: int,
        timeout: float,
    ) -> Intent:
        """As ``Via.run``."""
        self.client.submit(key, action, arguments, run_id=session, step=str(step))
        return self.client.wait(key, timeout)


class Database:
    """In a transaction of its own on oncebox's database (psycopg), for agents that share it.

    Each call connects with ``conninfo``, commits the intent, then waits for the workers'
    ``LISTEN``/``NOTIFY`` that intents settled, re-reading the journal at least every second.
    """

    def __init__(self, conninfo: str, *, tenant: str, config: Intake | Config) -> None:
        self.conninfo = conninfo
        self.tenant = tenant
        self.intake = config if isinstance(config, Intake) else Intake(config)

    def run(
        self,
        key: str,
        action: str,
        arguments: Mapping[str, Any],
        session: str,
        step: int,
        timeout: float,
    ) -> Intent:
        """As ``Via.run``."""
        import psycopg
        from psycopg import sql
        from psycopg.rows import dict_row

        from ._submit import INTENT_BY_KEY_PYFORMAT, submit

        deadline = time.monotonic() + timeout
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(_native.DONE_CHANNEL)))
            with conn.transaction():
                submitted = submit(
                    conn,
                    tenant=self.tenant,
                    key=key,
                    action=action,
                    arguments=arguments,
                    run_id=session,
                    step=str(step),
                    config=self.intake,
                )
            intent = submitted.intent
            while not intent.is_settled:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                for _ in conn.notifies(timeout=min(left, 1.0), stop_after=1):
                    pass
                with conn.cursor(row_factory=dict_row) as cur:
                    cur.execute(INTENT_BY_KEY_PYFORMAT, {"p1": self.tenant, "p2": key})
                    row = cur.fetchone()
                if row is not None:
                    intent = Intent.from_row(row)
            return intent


def outcome(intent: Intent) -> Intent:
    """``intent`` when it succeeded; otherwise the exception its ending calls for."""
    status = intent.status
    if status is Status.SUCCEEDED:
        return intent
    if status in (Status.FAILED, Status.EXPIRED):
        detail = (intent.error or {}).get("detail", "")
        raise IntentFailed(intent, f"{status.value}: {detail}".rstrip(": "))
    if status is Status.CANCELLED:
        raise IntentCancelled(intent, "cancelled before it was sent")
    if status is Status.NEEDS_REVIEW:
        raise NeedsReview(intent, "outcome unknown; a person must decide (oncebox ops show)")
    raise WaitTimeout(intent, f"still {status.value} when the wait ended; call again later")


class Tool(Generic[P]):
    """A tool function made idempotent; call it as ``tool(session, step, *args, **kwargs)``."""

    def __init__(
        self,
        action: str,
        build: Callable[P, Mapping[str, Any]],
        via: Via | Client,
        timeout: float,
    ) -> None:
        self.action = action
        self.build = build
        # A Client has no `run`: wrap it (without importing httpx for those who do not use it).
        self.via: Via = via if hasattr(via, "run") else Http(via)
        self.timeout = timeout
        functools.update_wrapper(self, build)

    def key(self, session: str, step: int, *args: P.args, **kwargs: P.kwargs) -> str:
        """The key this call submits under."""
        return step_key(session, step, self.action, self.build(*args, **kwargs))

    def __call__(self, session: str, step: int, *args: P.args, **kwargs: P.kwargs) -> Intent:
        arguments = self.build(*args, **kwargs)
        key = step_key(session, step, self.action, arguments)
        intent = self.via.run(key, self.action, arguments, session, step, self.timeout)
        return outcome(intent)


class AsyncTool(Generic[P]):
    """The async twin of ``Tool``, over an ``AsyncClient``: ``await tool(session, step, ...)``."""

    def __init__(
        self,
        action: str,
        build: Callable[P, Mapping[str, Any]],
        via: AsyncClient,
        timeout: float,
    ) -> None:
        self.action = action
        self.build = build
        self.via = via
        self.timeout = timeout
        functools.update_wrapper(self, build)

    def __call__(
        self, session: str, step: int, *args: P.args, **kwargs: P.kwargs
    ) -> Awaitable[Intent]:
        arguments = self.build(*args, **kwargs)
        key = step_key(session, step, self.action, arguments)

        async def run() -> Intent:
            await self.via.submit(key, self.action, arguments, run_id=session, step=str(step))
            return outcome(await self.via.wait(key, self.timeout))

        return run()


def tool(
    action: str, *, via: Via | Client, timeout: float = 30.0
) -> Callable[[Callable[P, Mapping[str, Any]]], Tool[P]]:
    """Decorates a function that maps a tool's parameters to the arguments of ``action``.

    ``via`` is a ``Client`` (HTTP), a ``Database`` (a transaction of its own), or anything
    with ``Via.run``; ``timeout`` is how long a call waits for the outcome, in seconds.
    """

    def wrap(build: Callable[P, Mapping[str, Any]]) -> Tool[P]:
        return Tool(action, build, via, timeout)

    return wrap


def async_tool(
    action: str, *, via: AsyncClient, timeout: float = 30.0
) -> Callable[[Callable[P, Mapping[str, Any]]], AsyncTool[P]]:
    """``tool`` for async agents, over an ``AsyncClient``."""

    def wrap(build: Callable[P, Mapping[str, Any]]) -> AsyncTool[P]:
        return AsyncTool(action, build, via, timeout)

    return wrap
