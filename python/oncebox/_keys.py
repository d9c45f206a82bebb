"""Idempotency keys and the request hash, computed by oncebox-core."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import _native
from ._intake import arguments_json


def validate_key(key: str) -> None:
    """Raises ``InvalidIntent`` (field ``idempotency_key``) unless ``key`` is 1 to 255 printable
    ASCII characters without spaces."""
    _native.validate_key(key)


def business_key(tenant: str, action: str, business_id: str, version: str) -> str:
    """A key for "this version of this business object, acted on by this action, for this
    tenant": two agents deciding the same thing converge on one key."""
    return _native.business_key(
        tenant=tenant, action=action, business_id=business_id, version=version
    )


def delivery_key(tenant: str, key: str) -> str:
    """What every destination sees as the identity of ``tenant``'s intent ``key``
    (``Idempotency-Key``, ``webhook-id``, AMQP ``message_id``): unique across tenants,
    ``TENANT:KEY`` where that is unambiguous and fits in 255 bytes, else a digest of both."""
    return _native.delivery_key(tenant=tenant, key=key)


def step_key(session: str, step: int, tool: str, arguments: Mapping[str, Any]) -> str:
    """A key for "this step of this agent session calling this tool with these arguments": a
    replayed step of the same session gets the same key."""
    if not 0 <= step < 2**64:
        from ._errors import InvalidIntent

        raise InvalidIntent("step", "must be an integer from 0 to 2^64 - 1")
    return _native.step_key(
        session=session, step=step, tool=tool, arguments=arguments_json(arguments)
    )


def canonical_json(value: Any) -> str:
    """RFC 8785 (JCS) canonical JSON of ``value``; numbers beyond ±2^53 are refused."""
    return _native.canonical_json(arguments_json(value, "document"))


def request_hash(action: str, arguments: Mapping[str, Any]) -> str:
    """Hex SHA-256 of the JCS form of ``{"action": action, "arguments": arguments}``, before any
    redaction (``Intake.recorded`` gives the hash an intent is recorded with)."""
    return _native.request_hash(action=action, arguments=arguments_json(arguments))
