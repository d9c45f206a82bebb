"""The MCP gateway with the agent SDKs most agent code uses — LangChain's MCP adapters
(``MultiServerMCPClient``, a new MCP session for every call) and the OpenAI Agents SDK
(``MCPServerStreamableHttp``, its own agent loop driven by a scripted model) — each run as a
separate process, as an agent that retries or restarts does. At a receiver that executes every
request: the same call twice is one effect and the second returns the first's result; other
identifying arguments are another effect; after the action's dedupe window, another; an
explicit ``_meta`` key wins. The MCP guide's snippets for both run as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conftest import ROOT, Services

SDKENV = Path(os.environ.get("ONCEBOX_SDKENV", ROOT / "target" / "sdkenv"))
DRIVER = Path(__file__).with_name("agent_sdks.py")
INVOICE = {"order_id": "o-1", "amount": "10.00"}


def config(receiver: str) -> str:
    """``create_invoice`` identified by all its arguments (a day), ``book_slot`` by its slot
    alone for two seconds."""
    return f"""
[actions.create_invoice]
destination = "billing"
[actions.create_invoice.tool]
description = "Create the invoice for an order, once."

[actions.book_slot]
destination = "billing"
[actions.book_slot.tool]
description = "Book a slot, once."
key = ["/slot"]
dedupe_window = "2s"

[destinations.billing]
kind = "http"
url = "{receiver}"
idempotency = "key"
"""


def run_sdk(
    sdk: str,
    services: Services,
    token: str,
    tool: str,
    arguments: dict[str, Any],
    *extra: str,
    stdin: str | None = None,
) -> dict[str, Any]:
    """One agent process of ``sdk`` making one call: the gateway's result."""
    python = str(SDKENV / "bin" / "python")
    command = [python, str(DRIVER), sdk, services.api_url, token, tool, json.dumps(arguments)]
    done = subprocess.run(
        [*command, *extra],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "ONCEBOX_URL": services.api_url, "ONCEBOX_TOKEN": token},
    )
    assert done.returncode == 0, done.stderr
    assert "termination failed" not in done.stderr.lower(), done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def older_than_window(db_url: str, key: str) -> None:
    """Waits until the intent under ``key`` is more than two seconds old (by the database)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        for _ in range(100):
            row = conn.execute(
                "SELECT now() - created_at > interval '2 seconds' FROM oncebox.intents"
                " WHERE idempotency_key = %s",
                (key,),
            ).fetchone()
            if row is not None and row[0]:
                return
            time.sleep(0.1)
    raise AssertionError(f"{key} never got older than the window")


@pytest.fixture
def gateway(services: Services) -> Services:
    services.receiver()
    services.config = services.tmp / "sdks.toml"
    services.config.write_text(config(services.receiver_url + "/invoices"))
    services.worker()
    services.serve("--tool-wait", "20s")
    return services


@pytest.mark.parametrize("sdk", ["langchain", "agents"])
def test_the_same_call_from_a_new_session_is_one_effect(gateway: Services, sdk: str) -> None:
    token = gateway.token("acme")
    first = run_sdk(sdk, gateway, token, "create_invoice", INVOICE)
    assert first["status"] == "succeeded", first
    second = run_sdk(sdk, gateway, token, "create_invoice", INVOICE)
    assert second == first, "the second call returns the first's result"
    key = first["idempotency_key"]
    assert gateway.effects(key) == 1
    other = run_sdk(sdk, gateway, token, "create_invoice", {**INVOICE, "order_id": "o-2"})
    assert other["idempotency_key"] != key
    assert gateway.effects(other["idempotency_key"]) == 1

    # book_slot is identified by its slot for two seconds: after that, the same call is new.
    slot = {"slot": "2026-12-03T10:00", "who": "ana"}
    booked = run_sdk(sdk, gateway, token, "book_slot", slot)
    older_than_window(gateway.db_url, booked["idempotency_key"])
    rebooked = run_sdk(sdk, gateway, token, "book_slot", slot)
    assert rebooked["idempotency_key"] != booked["idempotency_key"]
    for result in (booked, rebooked):
        assert result["status"] == "succeeded", result
        assert gateway.effects(result["idempotency_key"]) == 1


def test_an_explicit_meta_key_wins_with_the_agents_sdk(gateway: Services) -> None:
    token = gateway.token("acme")
    meta = json.dumps({"oncebox.dev/idempotency_key": "invoice-o-1"})
    mine = run_sdk("agents", gateway, token, "create_invoice", INVOICE, meta)
    again = run_sdk("agents", gateway, token, "create_invoice", INVOICE, meta)
    assert mine["idempotency_key"] == again["idempotency_key"] == "invoice-o-1"
    assert gateway.effects("invoice-o-1") == 1
    plain = run_sdk("agents", gateway, token, "create_invoice", INVOICE)
    assert plain["idempotency_key"] != "invoice-o-1", "no key: its own identity"


def snippet(name: str) -> str:
    """The MCP guide's python block that imports ``name``."""
    text = (ROOT / "docs" / "mcp.md").read_text()
    blocks: list[str] = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    (found,) = [b for b in blocks if name in b]
    return found


@pytest.mark.parametrize(
    ("sdk", "imports"),
    [("langchain", "langchain_mcp_adapters"), ("agents", "agents.mcp")],
)
def test_the_mcp_guide_snippets_run_as_written(gateway: Services, sdk: str, imports: str) -> None:
    token = gateway.token("acme")
    code = snippet(imports)
    args = {**INVOICE, "order_id": f"readme-{sdk}"}
    first = run_sdk(f"readme-{sdk}", gateway, token, "create_invoice", args, stdin=code)
    second = run_sdk(f"readme-{sdk}", gateway, token, "create_invoice", args, stdin=code)
    assert first["idempotency_key"] == second["idempotency_key"]
    assert gateway.effects(first["idempotency_key"]) == 1
