"""The MCP gateway with the official Python MCP client as the agent — over stdio (`oncebox
mcp`) and streamable HTTP (`/mcp` in `oncebox serve`): a tool call is an intent, carried out at
most once however often it is retried."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import httpx2
import psycopg
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import RequestParamsMeta

import oncebox
from conftest import REDACTION_KEYS, ROOT, Services

INVOICE = {"order_id": "order-1", "amount": "1.00"}


def meta(**fields: str) -> RequestParamsMeta:
    """A call's `_meta` with oncebox's keys (`run_id` → `oncebox.dev/run_id`…)."""
    return cast(RequestParamsMeta, {f"oncebox.dev/{k}": v for k, v in fields.items()})


RUN = meta(run_id="run-1", step="1")


@asynccontextmanager
async def over_stdio(services: Services, tenant: str, *extra: str) -> AsyncIterator[ClientSession]:
    assert services.config is not None
    params = StdioServerParameters(
        command=str(services.bin),
        args=["mcp", "--config", str(services.config), "--tenant", tenant, *extra],
        env={
            "DATABASE_URL": services.db_url,
            "ONCEBOX_REDACTION_KEYS": REDACTION_KEYS,
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        },
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@asynccontextmanager
async def over_http(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def structured(result: Any) -> dict[str, Any]:
    assert result.structured_content is not None, result
    content: dict[str, Any] = result.structured_content
    return content


def intents(db_url: str, tenant: str | None = None) -> int:
    with psycopg.connect(db_url) as conn:
        sql = "SELECT count(*) FROM oncebox.intents WHERE %s::text IS NULL OR tenant_id = %s"
        row = conn.execute(sql, (tenant, tenant)).fetchone()
        assert row is not None
        return int(row[0])


def test_over_stdio_tools_match_the_config_and_a_call_is_delivered_once(
    services: Services,
) -> None:
    services.receiver()
    services.worker()

    async def main() -> None:
        async with over_stdio(services, "acme") as mcp:
            listed = {t.name: t for t in (await mcp.list_tools()).tools}
            assert sorted(listed) == ["create_invoice", "get_intent", "pay_out"]
            invoice = listed["create_invoice"]
            assert invoice.description == "Create the invoice for an order, once."
            assert invoice.annotations is not None
            assert invoice.annotations.idempotent_hint is True
            assert invoice.annotations.destructive_hint is False
            assert invoice.annotations.read_only_hint is False
            pay_out = listed["pay_out"]
            assert pay_out.annotations is not None
            assert pay_out.annotations.destructive_hint is True
            assert pay_out.input_schema["required"] == ["amount"]
            get = listed["get_intent"]
            assert get.annotations is not None
            assert get.annotations.read_only_hint is True

            first = await mcp.call_tool("create_invoice", INVOICE, meta=RUN)
            assert not first.is_error, first
            done = structured(first)
            assert done["status"] == "succeeded"
            assert done["response"] is not None
            # The agent lost the answer and calls again: the same intent, no second effect.
            again = structured(await mcp.call_tool("create_invoice", INVOICE, meta=RUN))
            assert again["idempotency_key"] == done["idempotency_key"]
            assert again["status"] == "succeeded"
            key = done["idempotency_key"]
            assert key == oncebox.step_key("run-1", 1, "create_invoice", INVOICE)
            assert services.effects(key) == 1
            read = structured(await mcp.call_tool("get_intent", {"idempotency_key": key}))
            assert read["status"] == "succeeded"

            bad = await mcp.call_tool("pay_out", {"amount": 5}, meta=RUN)
            assert bad.is_error
            assert structured(bad)["field"] == "arguments/amount"
            other = await mcp.call_tool(
                "create_invoice", {"order_id": "x"}, meta=meta(idempotency_key=key)
            )
            assert other.is_error
            assert structured(other)["error"] == "conflict"

    asyncio.run(main())
    assert intents(services.db_url) == 1


def test_over_http_20_identical_calls_make_one_intent_and_tenants_are_apart(
    services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    services.receiver()
    services.worker()
    url = services.serve()
    a, b = services.token("tenant-a"), services.token("tenant-b")

    async def main() -> None:
        async with over_http(url, a) as mcp:
            results = await asyncio.gather(
                *(mcp.call_tool("create_invoice", INVOICE, meta=RUN) for _ in range(20))
            )
            keys = {structured(r)["idempotency_key"] for r in results}
            assert len(keys) == 1
            assert {structured(r)["status"] for r in results} == {"succeeded"}
            (key,) = keys
            # An explicit key needs neither a run nor a session.
            explicit = await mcp.call_tool(
                "create_invoice", {"order_id": "order-2"}, meta=meta(idempotency_key="inv-2")
            )
            assert structured(explicit)["idempotency_key"] == "inv-2"
            assert structured(explicit)["status"] == "succeeded"
        async with over_http(url, b) as mcp:
            # B cannot read A's intent, and the same call is B's own intent.
            seen = await mcp.call_tool("get_intent", {"idempotency_key": key})
            assert seen.is_error
            assert structured(seen)["error"] == "not_found"
            own = structured(await mcp.call_tool("create_invoice", INVOICE, meta=RUN))
            assert own["idempotency_key"] == key
            assert own["status"] == "succeeded"

    with caplog.at_level(logging.DEBUG, logger="mcp"):
        asyncio.run(main())
    assert intents(services.db_url, "tenant-a") == 2
    assert intents(services.db_url, "tenant-b") == 1
    # Each client ended its session (DELETE) and the gateway answered as the SDK expects.
    ended = [r.getMessage() for r in caplog.records if "termination" in r.getMessage().lower()]
    assert ended == [], ended


def test_over_http_a_token_is_required_and_foreign_hosts_and_origins_are_refused(
    services: Services,
) -> None:
    url = services.serve()
    token = services.token("tenant-a")
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    accept = {"accept": "application/json, text/event-stream"}
    with httpx2.Client() as http:
        anonymous = http.post(f"{url}/mcp", json=init, headers=accept)
        assert anonymous.status_code == 401
        auth = {**accept, "authorization": f"Bearer {token}"}
        ok = http.post(f"{url}/mcp", json=init, headers=auth)
        assert ok.status_code == 200, ok.text
        rebinding = http.post(f"{url}/mcp", json=init, headers={**auth, "host": "evil.example"})
        assert rebinding.status_code in (400, 403), rebinding.status_code
        browser = http.post(
            f"{url}/mcp", json=init, headers={**auth, "origin": "https://evil.example"}
        )
        assert browser.status_code == 403, browser.status_code


def test_the_gateway_killed_mid_call_and_the_call_retried_makes_one_effect(
    services: Services,
) -> None:
    services.receiver()
    url, gateway = services.serve_proc("--tool-wait", "30s")
    port = int(url.rsplit(":", 1)[1])
    token = services.token("tenant-a")

    async def first_call() -> None:
        async with over_http(url, token) as mcp:
            await mcp.call_tool("create_invoice", INVOICE, meta=RUN)

    async def main() -> None:
        call = asyncio.ensure_future(first_call())
        # The call's intent is committed (no worker runs yet, so it waits): kill the gateway.
        deadline = time.monotonic() + 30
        while intents(services.db_url) == 0:
            assert time.monotonic() < deadline, "the call never submitted"
            await asyncio.sleep(0.05)
        os.kill(gateway.pid, signal.SIGKILL)
        # Whatever the client makes of a connection cut mid-call, the call does not succeed.
        done, _ = await asyncio.wait({call}, timeout=30)
        assert done, "the call did not end when its server died"
        assert call.exception() is not None

    asyncio.run(main())
    assert gateway.wait(timeout=10) == -signal.SIGKILL
    services.worker()
    services.serve(port=port)

    async def retry() -> dict[str, Any]:
        async with over_http(url, token) as mcp:
            return structured(await mcp.call_tool("create_invoice", INVOICE, meta=RUN))

    result = asyncio.run(retry())
    assert result["status"] == "succeeded"
    assert intents(services.db_url) == 1
    assert services.effects(result["idempotency_key"], "tenant-a") == 1


def test_the_mcp_guide_stdio_configuration_runs(services: Services) -> None:
    """The MCP guide's `mcpServers` block, as a stdio client would run it (paths and URL ours)."""
    text = (ROOT / "docs" / "mcp.md").read_text()
    section = text[text.index("# For MCP agents") :]
    block = re.search(r"```json\n(.*?)```", section, flags=re.S)
    assert block is not None
    server = json.loads(block.group(1))["mcpServers"]["oncebox"]
    assert server["command"] == "oncebox"
    args = list(server["args"])
    args[args.index("--config") + 1] = str(services.config_file())
    params = StdioServerParameters(
        command=str(services.bin),
        args=args,
        env={
            **server["env"],
            "DATABASE_URL": services.db_url,
            "ONCEBOX_REDACTION_KEYS": REDACTION_KEYS,
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        },
    )

    async def main() -> list[str]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
            await mcp.initialize()
            return sorted(t.name for t in (await mcp.list_tools()).tools)

    assert asyncio.run(main()) == ["create_invoice", "get_intent", "pay_out"]


def gateway_pids(config: Path) -> list[int]:
    """The `oncebox mcp` processes serving ``config`` (read from /proc: the stdio client does
    not say which process it started)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mcp" in argv and str(config).encode() in argv:
            pids.append(int(proc.name))
    return pids


def test_the_stdio_gateway_killed_mid_call_and_the_call_retried_makes_one_effect(
    services: Services,
) -> None:
    services.receiver()
    config = services.config_file()
    killed: list[int] = []

    async def first_call() -> None:
        async with over_stdio(services, "acme", "--tool-wait", "30s") as mcp:
            call = asyncio.ensure_future(mcp.call_tool("create_invoice", INVOICE, meta=RUN))
            # The call's intent is committed (no worker runs yet, so it waits): kill the gateway.
            deadline = time.monotonic() + 30
            while intents(services.db_url) == 0:
                assert time.monotonic() < deadline, "the call never submitted"
                await asyncio.sleep(0.05)
            (pid,) = gateway_pids(config)
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            # Whatever the client makes of its server dying mid-call, the call does not succeed.
            done, _ = await asyncio.wait({call}, timeout=30)
            assert done, "the call did not end when its server died"
            assert call.exception() is not None or call.result().is_error

    try:
        asyncio.run(first_call())
    except AssertionError:
        raise
    except Exception:  # the client's teardown after its server died
        pass
    assert killed, "the gateway was not killed"
    assert gateway_pids(config) == []
    assert intents(services.db_url) == 1
    services.worker()

    async def retry() -> dict[str, Any]:
        # A new gateway process, so a new MCP session: the run and step in _meta name the call.
        async with over_stdio(services, "acme", "--tool-wait", "30s") as mcp:
            return structured(await mcp.call_tool("create_invoice", INVOICE, meta=RUN))

    result = asyncio.run(retry())
    assert result["status"] == "succeeded"
    assert intents(services.db_url) == 1
    assert services.effects(result["idempotency_key"]) == 1


def test_a_call_without_key_or_run_has_the_identity_python_computes(services: Services) -> None:
    """The gateway and ``oncebox`` identify a call that names no key and no run alike: by its
    tool and arguments within the window (here the default day), whatever the session."""
    services.receiver()
    services.worker()
    url = services.serve()
    token = services.token("acme")
    identity = oncebox._native.CallIdentity(tool="create_invoice", arguments=json.dumps(INVOICE))

    async def main() -> list[str]:
        keys = []
        for _ in range(2):
            async with over_http(url, token) as mcp:
                keys.append(
                    structured(await mcp.call_tool("create_invoice", INVOICE))["idempotency_key"]
                )
        return keys

    before = time.time()
    keys = asyncio.run(main())
    after = time.time()
    assert keys[0] == keys[1], "two sessions, one intent"
    assert keys[0] in {identity.keys_at(before)[0], identity.keys_at(after)[0]}
    assert services.effects(keys[0]) == 1


def test_the_stdio_gateway_records_its_configured_principal_or_the_database_role(
    services: Services,
) -> None:
    services.receiver()

    async def call(run: str, *extra: str) -> str:
        async with over_stdio(services, "acme", "--tool-wait", "250ms", *extra) as mcp:
            answer = await mcp.call_tool("create_invoice", INVOICE, meta=meta(run_id=run, step="1"))
            return str(structured(answer)["idempotency_key"])

    def submitter(key: str) -> str:
        with psycopg.connect(services.db_url) as conn:
            row = conn.execute(
                "SELECT submitted_by FROM oncebox.intents WHERE idempotency_key = %s", (key,)
            ).fetchone()
        assert row is not None, key
        return str(row[0])

    named = asyncio.run(call("run-named", "--principal", "desk-agent"))
    assert submitter(named) == "user:desk-agent"
    unnamed = asyncio.run(call("run-unnamed"))
    assert submitter(unnamed) == "db:postgres"
