"""The ``mcp`` destination kind: a worker delivers an intent by calling a tool on an upstream MCP
server (the official Python SDK's, in ``mcp_upstream.py``) over streamable HTTP, the key in
``_meta``. Its answers are lost after the tool ran (``ToolCallDropper``): a key-honouring tool
is called again and acts once; one that does not honour keys is never called twice and its
intents wait for a person. The gateway passes the server's read-only tools through."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import httpx
import psycopg
from mcp.types import RequestParamsMeta

import oncebox
from conftest import REDACTION_KEYS, Services, free_port, wait_for_port
from proxy import ToolCallDropper
from test_mcp import RUN, over_http, structured

UPSTREAM = Path(__file__).with_name("mcp_upstream.py")


class Upstream:
    """``mcp_upstream.py`` in a process of its own."""

    def __init__(self, tmp: Path, *flags: str) -> None:
        self.port = free_port()
        log = (tmp / "upstream.log").open("wb")
        args = [sys.executable, str(UPSTREAM), "--port", str(self.port), *flags]
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        wait_for_port(self.port, self.proc, "the upstream MCP server")

    def tickets(self) -> list[dict[str, Any]]:
        body = httpx.get(f"http://127.0.0.1:{self.port}/effects").json()
        tickets: list[dict[str, Any]] = body["tickets"]
        return tickets

    def effects(self, key: str, tenant: str = "acme") -> int:
        """Tickets opened for ``tenant``'s intent ``key`` (under its delivery key)."""
        sent = oncebox.delivery_key(tenant, key)
        return sum(1 for t in self.tickets() if t["key"] == sent)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=15)


def config(url: str, idempotency: str) -> str:
    return f"""
[actions.open_ticket]
destination = "helpdesk"
[actions.open_ticket.tool]
description = "Open a support ticket, once."
destructive = false

[destinations.helpdesk]
kind = "mcp"
url = "{url}/mcp"
tool = "create_ticket"
idempotency = "{idempotency}"
timeout = "5s"
reference_pointer = "/ticket_id"
read_only_tools = ["search_tickets"]
retry = {{ max_attempts = 5, initial_delay = "20ms", max_delay = "100ms" }}
"""


def submit(services: Services, subjects: dict[str, str]) -> None:
    assert services.config is not None
    intake = oncebox.Intake(oncebox.Config.load(services.config), REDACTION_KEYS)
    with psycopg.connect(services.db_url) as conn:
        for key, subject in subjects.items():
            oncebox.submit(
                conn,
                tenant="acme",
                key=key,
                action="open_ticket",
                arguments={"subject": subject},
                config=intake,
            )


def settle(db_url: str, count: int) -> dict[str, tuple[str, str | None, str | None, int]]:
    """Every intent's status, reference, error code and attempts, once all ``count`` settled."""
    deadline = time.monotonic() + 60
    rows: dict[str, tuple[str, str | None, str | None, int]] = {}
    while time.monotonic() < deadline:
        with psycopg.connect(db_url) as conn:
            found = conn.execute(
                "SELECT idempotency_key, status::text, external_reference, "
                "last_error->>'code', attempt_count FROM oncebox.intents"
            ).fetchall()
        rows = {k: (s, r, e, n) for k, s, r, e, n in found}
        settled = {"succeeded", "failed", "needs_review", "cancelled", "expired"}
        if len(rows) == count and all(v[0] in settled for v in rows.values()):
            return rows
        time.sleep(0.1)
    raise AssertionError(f"not settled within 60 s: {rows}")


def test_a_key_honouring_tool_whose_answers_are_lost_acts_once_per_intent(
    services: Services, tmp_path: Path
) -> None:
    upstream = Upstream(tmp_path, "--honour-keys")
    dropper = ToolCallDropper(("127.0.0.1", upstream.port), drop=4)
    try:
        services.config = tmp_path / "mcp.toml"
        services.config.write_text(config(dropper.url, "key"))
        keys = {f"ticket-{n}": f"printer {n} is jammed" for n in range(8)}
        submit(services, {**keys, "ticket-rejected": "reject"})
        services.worker()
        rows = settle(services.db_url, len(keys) + 1)
        # Each lost answer cost an attempt: the re-sent call found the first one's answer.
        assert sum(v[3] for v in rows.values()) == len(rows) + 4
        # The tool refused one for good: failed, tool_error, nothing opened.
        assert rows.pop("ticket-rejected")[:3] == ("failed", None, "tool_error")
        assert upstream.effects("ticket-rejected") == 0
        assert {v[0] for v in rows.values()} == {"succeeded"}, rows
        assert dropper.dropped == 4
        assert [upstream.effects(k) for k in keys] == [1] * len(keys)
        # The upstream knows each intent by its delivery key.
        opened = {t["key"]: t["ticket_id"] for t in upstream.tickets()}
        assert {oncebox.delivery_key("acme", k): v[1] for k, v in rows.items()} == opened
    finally:
        dropper.close()
        upstream.stop()


def test_a_tool_that_ignores_keys_is_not_called_twice_after_a_lost_answer(
    services: Services, tmp_path: Path
) -> None:
    upstream = Upstream(tmp_path, "--json-response")
    dropper = ToolCallDropper(("127.0.0.1", upstream.port), drop=3)
    try:
        services.config = tmp_path / "mcp.toml"
        services.config.write_text(config(dropper.url, "none"))
        keys = {f"ticket-{n}": f"screen {n} is dark" for n in range(6)}
        submit(services, keys)
        services.worker()
        rows = settle(services.db_url, len(keys))
        statuses = sorted(v[0] for v in rows.values())
        assert statuses == ["needs_review"] * 3 + ["succeeded"] * 3, rows
        # Every intent acted exactly once: a lost answer is a person's call, never a re-send.
        assert [upstream.effects(k) for k in keys] == [1] * len(keys)
        assert dropper.calls == len(keys)
    finally:
        dropper.close()
        upstream.stop()


def test_the_gateway_fronts_the_server_journaling_changes_and_passing_reads_through(
    services: Services, tmp_path: Path
) -> None:
    upstream = Upstream(tmp_path)
    try:
        services.config = tmp_path / "mcp.toml"
        services.config.write_text(config(f"http://127.0.0.1:{upstream.port}", "none"))
        services.worker()
        url = services.serve()
        token = services.token("acme")

        async def main() -> None:
            async with over_http(url, token) as mcp:
                listed = {t.name: t for t in (await mcp.list_tools()).tools}
                assert sorted(listed) == ["get_intent", "open_ticket", "search_tickets"]
                search = listed["search_tickets"]
                assert search.description == "Find the tickets with this subject."
                assert search.annotations is not None
                assert search.annotations.read_only_hint is True
                assert search.input_schema["required"] == ["subject"]
                opened = structured(
                    await mcp.call_tool("open_ticket", {"subject": "no wifi"}, meta=RUN)
                )
                assert opened["status"] == "succeeded", opened
                assert opened["external_reference"] == "T-1"
                again = structured(
                    await mcp.call_tool("open_ticket", {"subject": "no wifi"}, meta=RUN)
                )
                assert again["external_reference"] == "T-1"
                # A read-only call carries the caller's tenant, whatever the agent put there.
                forged = cast(RequestParamsMeta, {"oncebox.dev/tenant": "globex"})
                found = await mcp.call_tool("search_tickets", {"subject": "no wifi"}, meta=forged)
                assert not found.is_error
                assert structured(found) == {"tickets": ["T-1"]}

        asyncio.run(main())
        assert len(upstream.tickets()) == 1
        searches = httpx.get(f"http://127.0.0.1:{upstream.port}/effects").json()["searches"]
        assert searches == [{"meta": "acme", "header": "acme"}], searches
        with psycopg.connect(services.db_url) as conn:
            row = conn.execute("SELECT count(*) FROM oncebox.intents").fetchone()
            assert row is not None
            assert row[0] == 1, "a read-only call is not an intent"
    finally:
        upstream.stop()
