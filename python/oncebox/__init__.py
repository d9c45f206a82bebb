"""oncebox for Python: exactly-once intents for agent tools, on the same Rust core as oncebox.

Three ways in:

- ``submit(conn, ...)`` / ``await submit_async(conn, ...)`` — in your own Postgres transaction
  (psycopg 3 or SQLAlchemy 2, sync or async): the intent commits with your own rows, or not at
  all.
- ``Client`` / ``AsyncClient`` — over the HTTP API of ``oncebox serve`` (httpx), retrying with
  the same key and bytes.
- ``@tool("action", via=...)`` — an agent's tool function made idempotent: a retried call
  returns the recorded outcome and never makes a second effect.

Validation, keys, the RFC 8785 request hash, redaction and the TOML config are oncebox-core's
Rust code (``oncebox._native``), not a port.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _native
from ._errors import (
    ApiError,
    AwaitingApproval,
    ConfigError,
    IntentCancelled,
    IntentFailed,
    InvalidIntent,
    KeyConflict,
    NeedsReview,
    NotSucceeded,
    OnceboxError,
    Rejected,
    TransportError,
    WaitTimeout,
)
from ._intake import Config, Intake, Prepared
from ._keys import (
    business_key,
    canonical_json,
    delivery_key,
    request_hash,
    step_key,
    validate_key,
)
from ._model import SETTLED, TERMINAL, WAITING_FOR_A_PERSON, Intent, Status, Submitted
from ._submit import submit, submit_async
from .tool import AsyncTool, Database, Http, Tool, Via, async_tool, outcome, tool

if TYPE_CHECKING:
    from .client import AsyncClient, Client, RetryConfig

__version__: str = _native.VERSION


def __getattr__(name: str) -> Any:
    # The HTTP client needs httpx (the `http` extra): imported when first asked for.
    if name in ("Client", "AsyncClient", "RetryConfig"):
        from . import client

        return getattr(client, name)
    raise AttributeError(f"module 'oncebox' has no attribute {name!r}")


__all__ = [
    "SETTLED",
    "TERMINAL",
    "WAITING_FOR_A_PERSON",
    "ApiError",
    "AsyncClient",
    "AsyncTool",
    "AwaitingApproval",
    "Client",
    "Config",
    "ConfigError",
    "Database",
    "Http",
    "Intake",
    "Intent",
    "IntentCancelled",
    "IntentFailed",
    "InvalidIntent",
    "KeyConflict",
    "NeedsReview",
    "NotSucceeded",
    "OnceboxError",
    "Prepared",
    "Rejected",
    "RetryConfig",
    "Status",
    "Submitted",
    "Tool",
    "TransportError",
    "Via",
    "WaitTimeout",
    "async_tool",
    "business_key",
    "canonical_json",
    "delivery_key",
    "outcome",
    "request_hash",
    "step_key",
    "submit",
    "submit_async",
    "tool",
    "validate_key",
]
