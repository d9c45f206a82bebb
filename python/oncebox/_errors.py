"""The exceptions of oncebox, one hierarchy for the binding, the HTTP client and the tool wrapper.

Defined here, once: the native module raises ``InvalidIntent`` and ``ConfigError`` by importing
these very classes (PyO3's ``import_exception!``), so Rust's refusals and Python's are caught
alike. The classes a tool call raises for each ending are named by the core (``ENDINGS``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._model import Intent


class OnceboxError(Exception):
    """The base of every error oncebox raises."""


class InvalidIntent(OnceboxError, ValueError):
    """A field of an intent is not acceptable; nothing was written. Never retry as is."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        """The field at fault: ``idempotency_key``, ``action``, ``arguments/amount``..."""
        self.reason = reason
        """What is wrong and what to do instead."""


class ConfigError(OnceboxError, ValueError):
    """The TOML configuration (or the redaction keys) cannot be used."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        """The dotted path of the field (``destinations.billing.timeout``), or line and column."""
        self.reason = reason
        """What is wrong."""


class KeyConflict(OnceboxError):
    """The key already names an intent of this tenant with another request; nothing was written.

    Never retry as is: choose another key, or resend the original request.
    """

    def __init__(
        self, idempotency_key: str, existing_id: int, existing_hash: str, submitted_hash: str
    ) -> None:
        super().__init__(
            f"idempotency key {idempotency_key!r} already names intent {existing_id} with request "
            f"hash {existing_hash}; this request's hash is {submitted_hash}"
        )
        self.idempotency_key = idempotency_key
        self.existing_id = existing_id
        self.existing_hash = existing_hash
        self.submitted_hash = submitted_hash
        self.field = "idempotency_key"


class ApiError(OnceboxError):
    """The HTTP API refused the request (RFC 9457 problem). Refusals are never retried."""

    def __init__(self, status: int, title: str, detail: str, field: str | None = None) -> None:
        text = f"{status} {title}: {detail}"
        super().__init__(text if field is None else f"{text} (field {field})")
        self.status = status
        """The HTTP status."""
        self.title = title
        """The status's reason phrase."""
        self.detail = detail
        """What went wrong, for a person."""
        self.field = field
        """The field at fault, when one is."""


class TransportError(OnceboxError):
    """No answer came back after every retry: the intent may or may not exist.

    Submit again with the same key to find out; it is never created twice.
    """

    def __init__(self, url: str, attempts: int, cause: BaseException) -> None:
        super().__init__(f"no answer from {url} after {attempts} attempt(s): {cause}")
        self.url = url
        self.attempts = attempts


class NotSucceeded(OnceboxError):
    """The intent did not end ``succeeded`` (raised by the tool wrapper, never a silent success).

    ``intent`` is the intent as last seen.
    """

    def __init__(self, intent: Intent, message: str) -> None:
        super().__init__(f"intent {intent.idempotency_key!r} ({intent.action}): {message}")
        self.intent = intent


class IntentFailed(NotSucceeded):
    """The intent failed for good (``failed``, or ``expired`` before an attempt)."""


class IntentCancelled(NotSucceeded):
    """The intent was cancelled before it was sent."""


class NeedsReview(NotSucceeded):
    """Its outcome is unknown and a person must decide: do not act again until they have."""


class AwaitingApproval(NotSucceeded):
    """It waits for people to approve it (its action's approval policy): nothing was sent.

    Not slow, not failed: tell the user it awaits approval, and look again later with the same
    call (the same key finds it). People approve or reject it in the console or with ``oncebox
    ops approve``; if nobody does within its window it ends ``expired``.
    """


class Rejected(NotSucceeded):
    """A person rejected it while it awaited approval: it was never sent, and never will be."""


class WaitTimeout(NotSucceeded):
    """The intent was not settled within the wait; it goes on by itself. Call again later."""


#: The exception of each ending the core names (``oncebox._native.ENDINGS``).
ENDING_ERRORS: dict[str, type[NotSucceeded]] = {
    "IntentFailed": IntentFailed,
    "IntentCancelled": IntentCancelled,
    "NeedsReview": NeedsReview,
    "AwaitingApproval": AwaitingApproval,
    "Rejected": Rejected,
    "WaitTimeout": WaitTimeout,
}

__all__ = [
    "ApiError",
    "AwaitingApproval",
    "ConfigError",
    "IntentCancelled",
    "IntentFailed",
    "InvalidIntent",
    "KeyConflict",
    "NeedsReview",
    "NotSucceeded",
    "OnceboxError",
    "Rejected",
    "TransportError",
    "WaitTimeout",
]
