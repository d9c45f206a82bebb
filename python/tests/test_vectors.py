"""The known answers of crates/oncebox-core/vectors/keys.json, which the Rust and TypeScript
tests check too: delivery keys and tool-call keys are the same in every language."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import oncebox

VECTORS = Path(__file__).resolve().parents[2] / "crates/oncebox-core/vectors/keys.json"


def vectors(kind: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(VECTORS.read_text())[kind]
    assert found, f"no {kind} vectors"
    return found


def test_delivery_keys_match_the_vectors() -> None:
    for v in vectors("delivery_key"):
        assert oncebox.delivery_key(v["tenant"], v["key"]) == v["delivery_key"], v


def test_call_identities_match_the_vectors() -> None:
    for v in vectors("call_identity"):
        identity = oncebox._native.CallIdentity(
            tool=v["tool"],
            arguments=json.dumps(v["arguments"]),
            pointers=v["pointers"],
            window=float(v["window"]),
        )
        assert list(identity.keys_at(v["at"])) == v["keys_at"], v
        assert identity.key_for(v["at"], v["previous_created"]) == v["key"], v
