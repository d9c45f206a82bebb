"""A small upstream MCP server (the official SDK's ``MCPServer``, streamable HTTP) for the
``mcp`` destination's tests: it opens tickets and counts every one it opens.

``create_ticket`` is the tool that changes things: with ``--honour-keys`` it answers a key it
has seen (``_meta["oncebox.dev/idempotency_key"]``) with the first answer and opens nothing;
without, every call opens a ticket. A subject of ``"reject"`` is refused with a tool error.
``search_tickets`` changes nothing (``readOnlyHint``); it notes the tenant each call named
(``_meta["oncebox.dev/tenant"]`` and the ``X-Oncebox-Tenant`` header). ``GET /effects`` lists
the tickets opened, with the key each call carried, and the searches' tenants.

Run: ``python mcp_upstream.py --port P [--honour-keys] [--json-response]``.
"""

from __future__ import annotations

import argparse
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

KEY = "oncebox.dev/idempotency_key"
TENANT = "oncebox.dev/tenant"


def build(honour_keys: bool) -> MCPServer:
    server = MCPServer("tickets")
    tickets: list[dict[str, Any]] = []
    searches: list[dict[str, Any]] = []
    answered: dict[str, dict[str, Any]] = {}

    @server.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=honour_keys))
    async def create_ticket(subject: str, ctx: Context) -> dict[str, Any]:
        """Open a support ticket."""
        meta = ctx.request_context.meta or {}
        key = str(meta.get(KEY, ""))
        if honour_keys and key in answered:
            return answered[key]
        if subject == "reject":
            raise ToolError("subject 'reject' is not accepted")
        ticket = {"ticket_id": f"T-{len(tickets) + 1}", "subject": subject}
        tickets.append({**ticket, "key": key})
        answered[key] = ticket
        return ticket

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def search_tickets(subject: str, ctx: Context) -> dict[str, Any]:
        """Find the tickets with this subject."""
        meta = ctx.request_context.meta or {}
        http = ctx.request_context.request
        header = http.headers.get("x-oncebox-tenant") if isinstance(http, Request) else None
        searches.append({"meta": meta.get(TENANT), "header": header})
        found = [t["ticket_id"] for t in tickets if t["subject"] == subject]
        return {"tickets": found}

    async def effects(request: Request) -> Response:
        return JSONResponse({"tickets": tickets, "searches": searches})

    server.custom_route("/effects", methods=["GET"])(effects)

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--honour-keys", action="store_true")
    parser.add_argument("--json-response", action="store_true")
    args = parser.parse_args()
    build(args.honour_keys).run(
        "streamable-http", host="127.0.0.1", port=args.port, json_response=args.json_response
    )


if __name__ == "__main__":
    main()
