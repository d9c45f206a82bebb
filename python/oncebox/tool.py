"""The idempotent tool wrapper: "the agent retried and the customer was charged twice", solved.

A function decorated with ``@oncebox.tool("deduct_balance", via=...)`` maps the tool's
parameters to the action's arguments, and a call submits the intent (over HTTP or in a
transaction of its own), waits for the outcome and returns the succeeded intent. Its key is the
call's identity, never a connection's:

- ``tool(session, step, ...)`` — the agent's run and step: ``step_key(session, step, action,
  arguments)``. A retry of the same step — after a lost answer or a crash — finds the same
  intent.
- ``tool.once(...)`` — no run: the action and its identifying arguments (the decorator's
  ``key``, JSON pointers such as ``["/order_id"]``, else all of them), one intent within
  ``dedupe_window`` seconds of the first call (a day by default), as the MCP gateway identifies
  a call that names no key and no run. After the window an identical call is a new intent; for
  a deliberate second effect within it, change an identifying argument.

Either way a retried call never makes a second effect. Every ending but success raises:
``failed`` or ``expired`` as ``IntentFailed``, ``cancelled`` as ``IntentCancelled``,
``needs_review`` as ``NeedsReview``, ``awaiting_approval`` (waiting for people, not slow) as
``AwaitingApproval``, ``rejected`` as ``Rejected``, and a wait that ran out as ``WaitTimeout``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, cast

from . import _native
from ._errors import ENDING_ERRORS, ApiError, OnceboxError
from ._intake import Config, Intake, arguments_json
from ._keys import step_key
from ._model import Intent

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
        session: str | None,
        step: int | None,
        timeout: float,
    ) -> Intent:
        """Submits (a replay returns the existing intent) and waits up to ``timeout`` seconds."""
        ...

    def find(self, key: str) -> Intent | None:
        """The intent under ``key``, when there is one."""
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
        session: str | None,
        step: int | None,
        timeout: float,
    ) -> Intent:
        """As ``Via.run``."""
        step_text = None if step is None else str(step)
        self.client.submit(key, action, arguments, run_id=session, step=step_text)
        return self.client.wait(key, timeout)

    def find(self, key: str) -> Intent | None:
        """As ``Via.find``."""
        try:
            return self.client.get(key)
        except ApiError as e:
            if e.status == 404:
                return None
            raise


class Database:
    """In a transaction of its own on oncebox's database (psycopg), for agents that share it.

    Each call connects with ``conninfo``, commits the intent, then waits for the workers'
    ``LISTEN``/``NOTIFY`` that intents settled, re-reading the journal at least every second.
    """

    def __init__(self, conninfo: str, *, tenant: str, config: Intake | Config) -> None:
        self.conninfo = conninfo
        self.tenant = tenant
        self.intake = config if isinstance(config, Intake) else Intake(config)

    def find(self, key: str) -> Intent | None:
        """As ``Via.find``."""
        import psycopg
        from psycopg.rows import dict_row

        from ._submit import INTENT_BY_KEY_PYFORMAT

        with psycopg.connect(self.conninfo) as conn, conn.cursor(row_factory=dict_row) as cur:
            cur.execute(INTENT_BY_KEY_PYFORMAT, {"p1": self.tenant, "p2": key})
            row = cur.fetchone()
        return None if row is None else Intent.from_row(row)

    def run(
        self,
        key: str,
        action: str,
        arguments: Mapping[str, Any],
        session: str | None,
        step: int | None,
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
                    step=None if step is None else str(step),
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
    """``intent`` when it succeeded; otherwise the exception its ending calls for (the core's
    ``Status::ending``: the class and the message, the same in every language)."""
    ending = _native.ENDINGS.get(intent.status.value)
    if ending is None:
        return intent
    message = ending.message.replace("{status}", intent.status.value)
    detail = (intent.error or {}).get("detail")
    if ending.with_detail and isinstance(detail, str) and detail:
        message = f"{message}: {detail}"
    error = ENDING_ERRORS.get(ending.error)
    if error is None:
        raise OnceboxError(f"the core names an ending this package does not know: {ending.error}")
    raise error(intent, message)


class Identified:
    """How a call that names no run is identified: the action's identifying arguments and its
    dedupe window, from the decorator, else from the configuration a ``Database`` carries
    (``[actions.X.tool] key`` and ``dedupe_window``), else all the arguments and a day."""

    def __init__(self, action: str, key: Sequence[str] | None, dedupe_window: float | None) -> None:
        self.action = action
        self.key = None if key is None else list(key)
        self.dedupe_window = dedupe_window

    def identity(self, via: object, arguments: Mapping[str, Any]) -> _native.CallIdentity:
        """The identity of a call with ``arguments`` through ``via``."""
        intake = getattr(via, "intake", None)
        if self.key is None and self.dedupe_window is None and isinstance(intake, Intake):
            return intake.call_identity(self.action, arguments)
        window = 86400.0 if self.dedupe_window is None else self.dedupe_window
        return _native.CallIdentity(
            tool=self.action, arguments=arguments_json(arguments), pointers=self.key, window=window
        )


def window_key(identity: _native.CallIdentity, at: float, prior: Intent | None) -> str:
    """The key a call at ``at`` takes, ``prior`` being the intent under the previous window's
    key, if any: that key while its intent is less than a window old, else the current one."""
    return identity.key_for(at, None if prior is None else prior.created_at.timestamp())


class Tool(Generic[P]):
    """A tool function made idempotent; call it as ``tool(session, step, *args, **kwargs)`` —
    the agent's run and step — or as ``tool.once(*args, **kwargs)``, identified by its
    arguments within the dedupe window."""

    def __init__(
        self,
        action: str,
        build: Callable[P, Mapping[str, Any]],
        via: Via | Client,
        timeout: float,
        identified: Identified,
    ) -> None:
        self.action = action
        self.build = build
        # A Client has no `run`: wrap it (without importing httpx for those who do not use it).
        self.via: Via = cast(Via, via) if hasattr(via, "run") else Http(via)
        self.timeout = timeout
        self.identified = identified
        functools.update_wrapper(self, build)

    def key(self, session: str, step: int, *args: P.args, **kwargs: P.kwargs) -> str:
        """The key this call submits under."""
        return step_key(session, step, self.action, self.build(*args, **kwargs))

    def __call__(self, session: str, step: int, *args: P.args, **kwargs: P.kwargs) -> Intent:
        arguments = self.build(*args, **kwargs)
        key = step_key(session, step, self.action, arguments)
        intent = self.via.run(key, self.action, arguments, session, step, self.timeout)
        return outcome(intent)

    def once(self, *args: P.args, **kwargs: P.kwargs) -> Intent:
        """Calls the tool identified by its arguments, not a run: the same identifying
        arguments within the dedupe window of the first call are one intent, and its outcome
        is returned again."""
        arguments = self.build(*args, **kwargs)
        identity = self.identified.identity(self.via, arguments)
        at = time.time()
        current, previous = identity.keys_at(at)
        prior = None if previous == current else self.via.find(previous)
        key = window_key(identity, at, prior)
        intent = self.via.run(key, self.action, arguments, None, None, self.timeout)
        return outcome(intent)


class AsyncTool(Generic[P]):
    """The async twin of ``Tool``, over an ``AsyncClient``: ``await tool(session, step, ...)``
    or ``await tool.once(...)``."""

    def __init__(
        self,
        action: str,
        build: Callable[P, Mapping[str, Any]],
        via: AsyncClient,
        timeout: float,
        identified: Identified,
    ) -> None:
        self.action = action
        self.build = build
        self.via = via
        self.timeout = timeout
        self.identified = identified
        functools.update_wrapper(self, build)

    def once(self, *args: P.args, **kwargs: P.kwargs) -> Awaitable[Intent]:
        """As ``Tool.once``."""
        arguments = self.build(*args, **kwargs)
        identity = self.identified.identity(self.via, arguments)

        async def run() -> Intent:
            at = time.time()
            current, previous = identity.keys_at(at)
            prior = None
            if previous != current:
                try:
                    prior = await self.via.get(previous)
                except ApiError as e:
                    if e.status != 404:
                        raise
            key = window_key(identity, at, prior)
            await self.via.submit(key, self.action, arguments)
            return outcome(await self.via.wait(key, self.timeout))

        return run()

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
    action: str,
    *,
    via: Via | Client,
    timeout: float = _native.CLIENT_DEFAULTS.tool_wait,
    key: Sequence[str] | None = None,
    dedupe_window: float | None = None,
) -> Callable[[Callable[P, Mapping[str, Any]]], Tool[P]]:
    """Decorates a function that maps a tool's parameters to the arguments of ``action``.

    ``via`` is a ``Client`` (HTTP), a ``Database`` (a transaction of its own), or anything
    with ``Via.run`` and ``Via.find``; ``timeout`` is how long a call waits for the outcome, in
    seconds. ``key`` (JSON pointers into the arguments, ``["/order_id"]``) and
    ``dedupe_window`` (seconds) say how ``tool.once`` identifies a call; by default those of
    the action's ``[actions.X.tool]`` when ``via`` is a ``Database``, else all the arguments
    and a day — give the same as the action's tool section when agents also reach it over MCP.
    """

    def wrap(build: Callable[P, Mapping[str, Any]]) -> Tool[P]:
        return Tool(action, build, via, timeout, Identified(action, key, dedupe_window))

    return wrap


def async_tool(
    action: str,
    *,
    via: AsyncClient,
    timeout: float = _native.CLIENT_DEFAULTS.tool_wait,
    key: Sequence[str] | None = None,
    dedupe_window: float | None = None,
) -> Callable[[Callable[P, Mapping[str, Any]]], AsyncTool[P]]:
    """``tool`` for async agents, over an ``AsyncClient``."""

    def wrap(build: Callable[P, Mapping[str, Any]]) -> AsyncTool[P]:
        return AsyncTool(action, build, via, timeout, Identified(action, key, dedupe_window))

    return wrap
