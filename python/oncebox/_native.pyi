"""The native module: oncebox-core's rules, the store's statements and what the core knows
(Rust, via PyO3). Checked against the built module by ``mypy.stubtest`` in the test command."""

import enum
from typing import final

__all__ = [
    "CLIENT_DEFAULTS",
    "DONE_CHANNEL",
    "ENDINGS",
    "INTENT_BY_KEY",
    "INTENT_BY_KEY_PYFORMAT",
    "MAX_SAFE_INTEGER",
    "OUTBOX_CHANNEL",
    "REDACTION_KEYS_ENV",
    "SETTLED",
    "SUBMIT",
    "SUBMIT_ORDERED",
    "SUBMIT_ORDERED_PARAMS",
    "SUBMIT_ORDERED_PYFORMAT",
    "SUBMIT_PARAMS",
    "SUBMIT_PYFORMAT",
    "TERMINAL",
    "VERSION",
    "WAITING_FOR_A_PERSON",
    "CallIdentity",
    "ClientDefaults",
    "Config",
    "Ending",
    "Lane",
    "Prepared",
    "Rules",
    "Status",
    "business_key",
    "canonical_json",
    "delivery_key",
    "principal",
    "request_hash",
    "step_key",
    "validate_key",
]

SUBMIT: str
SUBMIT_PYFORMAT: str
SUBMIT_ORDERED: str
SUBMIT_ORDERED_PYFORMAT: str
INTENT_BY_KEY: str
INTENT_BY_KEY_PYFORMAT: str
SUBMIT_PARAMS: tuple[str, ...]
SUBMIT_ORDERED_PARAMS: tuple[str, ...]
OUTBOX_CHANNEL: str
DONE_CHANNEL: str
REDACTION_KEYS_ENV: str
MAX_SAFE_INTEGER: int
VERSION: str

class Status(str, enum.Enum):
    """Where an intent stands: the journal's statuses, as oncebox-core names them."""

    def __new__(cls, value: object) -> Status: ...

    AWAITING_APPROVAL = "awaiting_approval"
    PENDING = "pending"
    IN_FLIGHT = "in_flight"
    UNKNOWN = "unknown"
    RECONCILING = "reconciling"
    NEEDS_REVIEW = "needs_review"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    REJECTED = "rejected"

TERMINAL: frozenset[Status]
SETTLED: frozenset[Status]
WAITING_FOR_A_PERSON: frozenset[Status]

@final
class Ending:
    """What a tool call raises for an intent that did not succeed."""

    @property
    def error(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def with_detail(self) -> bool: ...

ENDINGS: dict[str, Ending]

@final
class ClientDefaults:
    """The HTTP clients' defaults, in seconds."""

    @property
    def attempts(self) -> int: ...
    @property
    def min_delay(self) -> float: ...
    @property
    def max_delay(self) -> float: ...
    @property
    def timeout(self) -> float: ...
    @property
    def max_wait(self) -> int: ...
    @property
    def tool_wait(self) -> float: ...

CLIENT_DEFAULTS: ClientDefaults

def validate_key(key: str) -> None: ...
def business_key(*, tenant: str, action: str, business_id: str, version: str) -> str: ...
def delivery_key(*, tenant: str, key: str) -> str: ...
def principal(name: str) -> str: ...
def step_key(*, session: str, step: int, tool: str, arguments: str) -> str: ...
def canonical_json(document: str) -> str: ...
def request_hash(*, action: str, arguments: str) -> str: ...

@final
class CallIdentity:
    def __new__(
        cls,
        *,
        tool: str,
        arguments: str,
        pointers: list[str] | None = None,
        window: float = 86400.0,
    ) -> CallIdentity: ...
    @property
    def window(self) -> float: ...
    def keys_at(self, at: float) -> tuple[str, str]: ...
    def key_for(self, at: float, previous_created: float | None = None) -> str: ...

@final
class Config:
    @staticmethod
    def from_toml(text: str) -> Config: ...
    @property
    def actions(self) -> list[str]: ...

@final
class Prepared:
    """What an intent is recorded as, and what its action's approval policy asks of it."""

    @property
    def payload(self) -> str: ...
    @property
    def redacted(self) -> bool: ...
    @property
    def request_hash(self) -> str: ...
    @property
    def approvals(self) -> int | None: ...
    @property
    def approval_window(self) -> float | None: ...

@final
class Lane:
    """The lane an action's intents with an ordering key queue in."""

    @property
    def destination(self) -> str: ...
    @property
    def skip_failed(self) -> bool: ...

@final
class Rules:
    def __new__(cls, config: Config, *, redaction_keys: str | None = None) -> Rules: ...
    @property
    def actions(self) -> list[str]: ...
    def prepare(
        self,
        *,
        tenant: str,
        key: str,
        action: str,
        arguments: str,
        business_ref: str | None = None,
        run_id: str | None = None,
        step: str | None = None,
        ordering_key: str | None = None,
    ) -> Prepared: ...
    def lane(self, action: str) -> Lane: ...
    def call_identity(self, *, action: str, arguments: str) -> CallIdentity: ...
    def recorded(self, *, action: str, arguments: str) -> Prepared: ...
    def is_replay(
        self,
        *,
        action: str,
        arguments: str,
        submitted_hash: str,
        recorded_hash: str,
        recorded_payload: str,
    ) -> bool: ...
