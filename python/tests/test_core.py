"""The binding is oncebox-core itself: keys, the request hash (checked against the independent
`rfc8785` package and the `oncebox hash` binary), the refusals, redaction and the config."""

from __future__ import annotations

import hashlib
import json
import math
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest
import rfc8785

import oncebox
from conftest import REDACTION_KEYS, config_toml

SAFE = 2**53 - 1  # the `rfc8785` package's integer domain; oncebox's is ±2^53


def document(rng: random.Random, depth: int = 0) -> Any:
    """A JSON value with the shapes RFC 8785 is particular about: key order by UTF-16 code
    units, escapes, non-ASCII, float formatting around the exponent switch points, -0.0."""
    kinds = ["int", "float", "str", "bool", "null"] + (["obj", "arr"] * 2 if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "int":
        return rng.choice([0, 1, -1, SAFE, -SAFE, rng.randint(-SAFE, SAFE), rng.randint(-999, 999)])
    if kind == "float":
        exponent = rng.choice([-324, -30, -7, -6, -1, 0, 1, 15, 20, 21, 22, 100, 300])
        value = rng.uniform(-10, 10) * 10.0 ** max(exponent, -300)
        if abs(value) >= 2**53:  # a number beyond ±2^53 is refused (tested apart)
            value = math.copysign(rng.random(), value)
        return rng.choice([value, -0.0, 0.5, 1e-7, 1e-6, 123456789.125, float(rng.randint(-5, 5))])
    if kind == "str":
        alphabet = 'aZ09 "\\/\b\f\n\r\t\x01\x1f\x7fé€😀\u2028\ufeff𝄞'
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "arr":
        return [document(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = ["a", "b", "aa", "B", "é", "€", "😀", "\u00e9\u0301", "10", "1", "", "ﬀ", "𝄞"]
    return {rng.choice(keys): document(rng, depth + 1) for _ in range(rng.randint(0, 5))}


def test_request_hash_parity_with_rfc8785_and_the_binary_on_1000_documents(
    oncebox_bin: Path,
) -> None:
    rng = random.Random(8785)
    checked = 0
    for n in range(1000):
        arguments: Any = {"n": n, "value": document(rng)}
        ours = oncebox.canonical_json(arguments)
        theirs = rfc8785.dumps(arguments).decode()
        assert ours == theirs, arguments
        request: Any = {"action": "create_invoice", "arguments": arguments}
        expected = hashlib.sha256(rfc8785.dumps(request)).hexdigest()
        assert oncebox.request_hash("create_invoice", arguments) == expected, arguments
        text = json.dumps(arguments, ensure_ascii=False)
        cli = subprocess.run(
            [oncebox_bin, "hash", "--action", "create_invoice", "--arguments", text],
            check=True,
            capture_output=True,
        )
        assert cli.stdout.decode().strip() == expected, arguments
        checked += 1
    assert checked == 1000


def test_numbers_beyond_2_53_and_nul_are_refused_naming_the_field() -> None:
    for big in (2**53 + 1, -(2**53) - 1, 10**400, 1e300):
        with pytest.raises(oncebox.InvalidIntent) as e:
            oncebox.request_hash("a", {"order": {"amount": big}})
        assert e.value.field == "arguments/order/amount", e.value
    assert oncebox.request_hash("a", {"x": 2**53}) == oncebox.request_hash("a", {"x": 2.0**53})
    config = oncebox.Config.from_toml(config_toml())
    intake = oncebox.Intake(config, REDACTION_KEYS)
    with pytest.raises(oncebox.InvalidIntent) as e:
        intake.prepare(tenant="t", key="k", action="create_invoice", arguments={"n": "a\x00b"})
    assert e.value.field == "arguments/n"
    with pytest.raises(oncebox.InvalidIntent) as e:
        intake.prepare(tenant="t", key="k", action="create_invoice", arguments={"x": math.nan})
    assert e.value.field == "arguments"


def test_keys_are_validated_and_derived_as_in_rust(oncebox_bin: Path) -> None:
    for bad in ("", "has space", "é", "k" * 256):
        with pytest.raises(oncebox.InvalidIntent) as e:
            oncebox.validate_key(bad)
        assert e.value.field == "idempotency_key"
    oncebox.validate_key("order-8172:create_invoice/v1")
    # The documented derivations, recomputed here from their definitions.
    args: Any = {"b": 1, "a": [True, None]}
    expected = hashlib.sha256(b"run-7:3:deduct:" + rfc8785.dumps(args)).hexdigest()
    assert oncebox.step_key("run-7", 3, "deduct", args) == expected
    parts = b"acme|create_invoice|order-8172|v1"
    assert oncebox.business_key("acme", "create_invoice", "order-8172", "v1") == (
        hashlib.sha256(parts).hexdigest()
    )
    with pytest.raises(oncebox.InvalidIntent) as e:
        oncebox.step_key("run-7", -1, "deduct", args)
    assert e.value.field == "step"


def test_the_config_loader_is_rusts_naming_the_dotted_path(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(config_toml())
    assert oncebox.Config.load(path).actions == [
        "charge_card",
        "create_invoice",
        "pay_out",
        "wire_transfer",
    ]
    broken = config_toml().replace('idempotency = "none"', 'idempotency = "sometimes"')
    with pytest.raises(oncebox.ConfigError) as e:
        oncebox.Config.from_toml(broken)
    assert e.value.field.startswith("destinations.bank"), e.value
    dangling = config_toml().replace('destination = "bank"', 'destination = "nowhere"')
    with pytest.raises(oncebox.ConfigError) as e:
        oncebox.Config.from_toml(dangling)
    assert e.value.field == "actions.wire_transfer.destination"


def test_a_hashing_rule_needs_a_key_and_redaction_matches_the_binary(
    oncebox_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = oncebox.Config.from_toml(config_toml())
    monkeypatch.delenv("ONCEBOX_REDACTION_KEYS", raising=False)
    with pytest.raises(oncebox.ConfigError) as e:
        oncebox.Intake(config)
    assert e.value.field == "actions.charge_card.redact"
    intake = oncebox.Intake(config, REDACTION_KEYS)
    arguments = {"card": "4111111111111111", "cvv": "123", "amount": "5.00"}
    recorded = intake.recorded("charge_card", arguments)
    payload = json.loads(recorded.payload_json)
    assert recorded.redacted
    assert "cvv" not in payload
    assert payload["card"].startswith("hmac-sha256:k1:")
    path = tmp_path / "c.toml"
    path.write_text(config_toml())
    cli = subprocess.run(
        [
            oncebox_bin,
            "hash",
            "--config",
            str(path),
            "--action",
            "charge_card",
            "--arguments",
            json.dumps(arguments),
        ],
        check=True,
        capture_output=True,
        env={"ONCEBOX_REDACTION_KEYS": REDACTION_KEYS, "PATH": "/usr/bin:/bin"},
    )
    assert cli.stdout.decode().strip() == recorded.request_hash
    with pytest.raises(oncebox.InvalidIntent) as unknown:
        intake.recorded("refund", {})
    assert unknown.value.field == "action"
    assert "configured: charge_card, create_invoice, pay_out, wire_transfer" in unknown.value.reason


def test_the_native_module_holds_and_raises_the_package_exceptions() -> None:
    """The classes the Rust code raises are the package's own, defined once in Python and
    imported by the native module: caught as ``oncebox.InvalidIntent`` / ``ConfigError``, as
    ``OnceboxError`` and as ``ValueError``."""
    from oncebox import _errors

    assert oncebox.InvalidIntent is _errors.InvalidIntent
    assert oncebox.ConfigError is _errors.ConfigError
    assert issubclass(oncebox.KeyConflict, _errors.OnceboxError)
    with pytest.raises(oncebox.InvalidIntent) as invalid:
        oncebox.validate_key("")
    assert invalid.value.field == "idempotency_key"
    assert isinstance(invalid.value, ValueError)
    assert isinstance(invalid.value, oncebox.OnceboxError)
    with pytest.raises(oncebox.ConfigError) as config:
        oncebox.Config.from_toml("[actions.a]\ndestination = 'nowhere'\n")
    assert config.value.field == "actions.a.destination"
