"""The operator's configuration and the intake rules, both the Rust code itself."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from . import _native
from ._errors import InvalidIntent

if TYPE_CHECKING:
    from typing_extensions import NotRequired, Unpack

    from ._model import Submitted
    from ._submit import AsyncConn, SyncConn


class IntentFields(TypedDict):
    """What ``Intake.submit`` takes besides the connection (as ``oncebox.submit`` does)."""

    tenant: str
    key: str
    action: str
    arguments: Mapping[str, Any]
    business_ref: NotRequired[str | None]
    run_id: NotRequired[str | None]
    step: NotRequired[str | None]
    deadline: NotRequired[datetime | None]
    notify: NotRequired[bool]
    ordering_key: NotRequired[str | None]
    principal: NotRequired[str | None]


class Config:
    """The operator's TOML configuration (actions, destinations, redaction), read by the same
    loader as ``oncebox serve`` and ``oncebox worker``: a bad value raises ``ConfigError``
    naming its dotted path."""

    def __init__(self, native: _native.Config) -> None:
        self._native = native
        self._intake: Intake | None = None

    def intake(self) -> Intake:
        """The intake of this configuration with the redaction keys of the environment, built
        once: what ``submit(config=...)`` uses when given a ``Config``."""
        if self._intake is None:
            self._intake = Intake(self)
        return self._intake

    @classmethod
    def from_toml(cls, text: str) -> Config:
        """Parses and validates a TOML document."""
        return cls(_native.Config.from_toml(text))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Config:
        """Reads and validates the TOML file at ``path``."""
        return cls.from_toml(Path(path).read_text(encoding="utf-8"))

    @property
    def actions(self) -> list[str]:
        """The configured action names, in order."""
        return self._native.actions


@dataclass(frozen=True)
class Prepared:
    """A validated intent as the journal records it."""

    arguments_json: str
    """The arguments as given (JSON text)."""
    payload_json: str
    """The arguments after redaction (JSON text), stored in the journal."""
    redacted: bool
    """Whether redaction changed them (the originals then travel on the outbox row only)."""
    request_hash: str
    """The request hash over the action and the redacted arguments."""
    approvals: int | None = None
    """How many distinct people must approve it before it is sent (its action's approval
    policy); ``None`` when it is sent without waiting."""
    approval_window: float | None = None
    """How many seconds they have (``expires_after``; the deadline wins when earlier)."""


class Intake:
    """Accepts intents for the configured actions: validation, redaction and the request hash
    are ``oncebox-core``'s, exactly as the Rust intake applies them.

    Build one at start-up and pass it as ``config=`` to every ``submit``. ``redaction_keys`` is
    the ``ONCEBOX_REDACTION_KEYS`` format (``id:secret[,older…]``); ``None`` reads that
    variable. A configuration that redacts by hash without a key raises ``ConfigError``.

    ``principal`` names the person or service that submits (recorded as ``user:NAME``; it may
    not approve what it submits); a submit may name another. Without one, the journal records
    the database role the submit runs under (``db:ROLE``). A name that cannot be one raises
    ``InvalidIntent`` naming ``principal``.
    """

    def __init__(
        self, config: Config, redaction_keys: str | None = None, principal: str | None = None
    ) -> None:
        self.config = config
        self._rules = _native.Rules(config._native, redaction_keys=redaction_keys)
        self.principal: str | None = None if principal is None else _native.principal(principal)
        """The submitter this intake records (``user:NAME``), if it names one."""

    @property
    def actions(self) -> list[str]:
        """The names of the actions this intake accepts, in order."""
        return self._rules.actions

    def prepare(
        self,
        *,
        tenant: str,
        key: str,
        action: str,
        arguments: Mapping[str, Any],
        business_ref: str | None = None,
        run_id: str | None = None,
        step: str | None = None,
        ordering_key: str | None = None,
    ) -> Prepared:
        """Checks every field and returns what the intent is recorded as.

        Raises ``InvalidIntent`` naming the field.
        """
        text = arguments_json(arguments)
        p = self._rules.prepare(
            tenant=tenant,
            key=key,
            action=action,
            arguments=text,
            business_ref=business_ref,
            run_id=run_id,
            step=step,
            ordering_key=ordering_key,
        )
        return Prepared(text, p.payload, p.redacted, p.request_hash, p.approvals, p.approval_window)

    def lane(self, action: str) -> _native.Lane:
        """The lane ``action``'s intents with an ordering key queue in: the destination's name
        (``destination``), and whether its lanes go on past a failed head (``skip_failed``,
        ``on_failure = "skip"``)."""
        return self._rules.lane(action)

    def call_identity(self, action: str, arguments: Mapping[str, Any]) -> _native.CallIdentity:
        """The identity of a call of ``action`` with ``arguments`` that names no key and no
        run: its ``[actions.X.tool]`` key and dedupe window (all the arguments and a day
        without one), as the MCP gateway identifies it."""
        return self._rules.call_identity(action=action, arguments=arguments_json(arguments))

    def recorded(self, action: str, arguments: Mapping[str, Any]) -> Prepared:
        """What ``action`` with ``arguments`` is recorded as (``oncebox hash --config``)."""
        text = arguments_json(arguments)
        p = self._rules.recorded(action=action, arguments=text)
        return Prepared(text, p.payload, p.redacted, p.request_hash)

    def is_replay(
        self, action: str, prepared: Prepared, recorded_hash: str, recorded_payload: Any
    ) -> bool:
        """Whether a submit whose key names a recorded intent repeats its request (also
        across a rotation of redaction keys)."""
        return self._rules.is_replay(
            action=action,
            arguments=prepared.arguments_json,
            submitted_hash=prepared.request_hash,
            recorded_hash=recorded_hash,
            recorded_payload=json.dumps(recorded_payload, ensure_ascii=False),
        )

    def submit(self, conn: SyncConn, **intent: Unpack[IntentFields]) -> Submitted:
        """``oncebox.submit(conn, ..., config=self)``: records an intent in the journal and the
        outbox inside the caller's open transaction (see there), with this intake's rules."""
        from ._submit import submit

        return submit(conn, config=self, **intent)

    async def submit_async(self, conn: AsyncConn, **intent: Unpack[IntentFields]) -> Submitted:
        """``oncebox.submit_async(conn, ..., config=self)``: ``submit`` for an async connection."""
        from ._submit import submit_async

        return await submit_async(conn, config=self, **intent)


def arguments_json(arguments: Any, field: str = "arguments") -> str:
    """``arguments`` as JSON text for the Rust reader, or ``InvalidIntent`` naming ``field``."""
    try:
        return json.dumps(arguments, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidIntent(field, f"not JSON: {e}") from None
