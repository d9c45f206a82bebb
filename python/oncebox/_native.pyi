"""The native module: oncebox-core's rules and the store's statements (Rust, via PyO3)."""

SUBMIT: str
SUBMIT_PYFORMAT: str
SUBMIT_ORDERED: str
SUBMIT_ORDERED_PYFORMAT: str
INTENT_BY_KEY: str
INTENT_BY_KEY_PYFORMAT: str
OUTBOX_CHANNEL: str
DONE_CHANNEL: str
REDACTION_KEYS_ENV: str
MAX_SAFE_INTEGER: int
VERSION: str

class OnceboxError(Exception):
    """The base of every error oncebox raises."""

class InvalidIntent(OnceboxError, ValueError):
    """A field of an intent is not acceptable; nothing was written. Never retry as is."""

    field: str
    reason: str
    def __init__(self, field: str, reason: str) -> None: ...

class ConfigError(OnceboxError, ValueError):
    """The TOML configuration (or the redaction keys) cannot be used."""

    field: str
    reason: str
    def __init__(self, field: str, reason: str) -> None: ...

def validate_key(key: str) -> None: ...
def business_key(tenant: str, action: str, business_id: str, version: str) -> str: ...
def delivery_key(tenant: str, key: str) -> str: ...
def principal(name: str) -> str: ...
def step_key(session: str, step: int, tool: str, arguments: str) -> str: ...
def canonical_json(document: str) -> str: ...
def request_hash(action: str, arguments: str) -> str: ...

class CallIdentity:
    def __init__(
        self,
        tool: str,
        arguments: str,
        pointers: list[str] | None = None,
        window: float = 86400.0,
    ) -> None: ...
    @property
    def window(self) -> float: ...
    def keys_at(self, at: float) -> tuple[str, str]: ...
    def key_for(self, at: float, previous_created: float | None = None) -> str: ...

class Config:
    @staticmethod
    def from_toml(text: str) -> Config: ...
    @property
    def actions(self) -> list[str]: ...

class Rules:
    def __init__(self, config: Config, redaction_keys: str | None = None) -> None: ...
    @property
    def actions(self) -> list[str]: ...
    def prepare(
        self,
        tenant: str,
        key: str,
        action: str,
        arguments: str,
        business_ref: str | None,
        run_id: str | None,
        step: str | None,
        ordering_key: str | None = None,
    ) -> tuple[str, bool, str, int | None, float | None]: ...
    def lane(self, action: str) -> tuple[str, bool]: ...
    def call_identity(self, action: str, arguments: str) -> CallIdentity: ...
    def recorded(self, action: str, arguments: str) -> tuple[str, bool, str]: ...
    def is_replay(
        self,
        action: str,
        arguments: str,
        submitted_hash: str,
        recorded_hash: str,
        recorded_payload: str,
    ) -> bool: ...
