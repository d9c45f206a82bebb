"""Drives oncebox's MCP gateway with the agent SDKs most agent code uses — LangChain's MCP
adapters and the OpenAI Agents SDK — as a separate process in their own pinned venv
(``scripts/sdkenv.sh``: they need an MCP SDK older than the one the other tests pin).

Each run is one agent process making one tool call, as an agent that restarts, retries a run or
(with LangChain) opens a new MCP session for every call does. It prints one JSON document: the
call's result as the gateway returned it. Warnings the SDKs log go to stderr.

    python agent_sdks.py langchain URL TOKEN TOOL ARGUMENTS_JSON
    python agent_sdks.py agents URL TOKEN TOOL ARGUMENTS_JSON [META_JSON]
    python agent_sdks.py readme-langchain URL TOKEN TOOL ARGUMENTS_JSON < SNIPPET
    python agent_sdks.py readme-agents URL TOKEN TOOL ARGUMENTS_JSON < SNIPPET

With ``agents``, the Agents SDK's own loop runs: a scripted model (no network) asks for the
tool call once, then answers with what the tool returned. The ``readme-`` forms run a snippet
of docs/mcp.md as written (with ``ONCEBOX_URL`` and ``ONCEBOX_TOKEN`` set), then make the call
with the client it built.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterator
from typing import Any


async def langchain_call(url: str, token: str, tool: str, arguments: dict[str, Any]) -> Any:
    """One call through LangChain's ``MultiServerMCPClient`` (a session of its own)."""
    from langchain_mcp_adapters.client import MultiServerMCPClient

    client = MultiServerMCPClient(
        {
            "oncebox": {
                "transport": "streamable_http",
                "url": f"{url}/mcp",
                "headers": {"Authorization": f"Bearer {token}"},
            }
        }
    )
    tools = {t.name: t for t in await client.get_tools()}
    result = await tools[tool].ainvoke(arguments)
    return structured(result)


def structured(result: Any) -> Any:
    """The gateway's structured result in what an SDK returned: a JSON text, alone or in
    content blocks (``[{"type": "text", "text": ...}]``)."""
    if isinstance(result, tuple):
        result = result[0]
    if isinstance(result, str):
        try:
            result = json.loads(result)
        except json.JSONDecodeError:
            return result
    if isinstance(result, list) and all(isinstance(b, dict) and "text" in b for b in result):
        return structured("".join(str(b["text"]) for b in result))
    return result


def scripted_model(tool: str, arguments: dict[str, Any]) -> Any:
    """A model that asks for one call of ``tool`` with ``arguments``, then answers with the
    tool's output: the Agents SDK's loop without a network."""
    from agents.models.interface import Model

    class ScriptedModel(Model):  # type: ignore[misc]
        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            return await scripted_response(tool, arguments, args, kwargs)

        async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            raise NotImplementedError("the scripted model does not stream")
            yield None

    return ScriptedModel()


async def scripted_response(
    tool: str, arguments: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """The scripted model's answer: the tool call first, then the tool's output as text."""
    from agents.items import ModelResponse
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    given = args[1] if len(args) > 1 else kwargs.get("input")
    outputs = [
        item
        for item in (given if isinstance(given, list) else [])
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    if not outputs:
        call = ResponseFunctionToolCall(
            id="fc_1",
            call_id="call_1",
            name=tool,
            arguments=json.dumps(arguments),
            type="function_call",
            status="completed",
        )
        return ModelResponse(output=[call], usage=Usage(), response_id=None)
    text = outputs[-1].get("output")
    message = ResponseOutputMessage(
        id="msg_1",
        role="assistant",
        status="completed",
        type="message",
        content=[
            ResponseOutputText(
                type="output_text",
                text=text if isinstance(text, str) else json.dumps(text),
                annotations=[],
            )
        ],
    )
    return ModelResponse(output=[message], usage=Usage(), response_id=None)


async def agents_call(
    url: str, token: str, tool: str, arguments: dict[str, Any], meta: dict[str, Any] | None
) -> Any:
    """One run of an Agents SDK agent whose scripted model calls ``tool`` once; with ``meta``,
    the call is made directly on the server with that ``_meta`` instead."""
    from agents import Agent, Runner, set_tracing_disabled
    from agents.mcp import MCPServerStreamableHttp

    set_tracing_disabled(True)
    server = MCPServerStreamableHttp(
        params={"url": f"{url}/mcp", "headers": {"Authorization": f"Bearer {token}"}},
        client_session_timeout_seconds=30,
    )
    async with server:
        if meta is not None:
            result = await server.call_tool(tool, arguments, meta=meta)
            return result.structuredContent
        agent = Agent(
            name="billing",
            instructions="Bill the order.",
            mcp_servers=[server],
            model=scripted_model(tool, arguments),
        )
        run = await Runner.run(agent, "Bill order o-1.")
        return structured(run.final_output)


async def readme_call(sdk: str, snippet: str, tool: str, arguments: dict[str, Any]) -> Any:
    """Runs a docs/mcp.md snippet as written, then calls ``tool`` with what it built: LangChain's
    ``client``, or the Agents SDK's ``oncebox_tools`` server (its ``agent`` holds it)."""
    namespace: dict[str, Any] = {"__name__": "__readme__"}
    exec(compile(snippet, f"docs/mcp.md {sdk} snippet", "exec"), namespace)
    if sdk == "langchain":
        tools = {t.name: t for t in await namespace["client"].get_tools()}
        return structured(await tools[tool].ainvoke(arguments))
    server = namespace["oncebox_tools"]
    assert server in namespace["agent"].mcp_servers
    async with server:
        return (await server.call_tool(tool, arguments)).structuredContent


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    sdk, url, token, tool, arguments = sys.argv[1:6]
    meta = json.loads(sys.argv[6]) if len(sys.argv) > 6 else None
    args = json.loads(arguments)
    if sdk == "langchain":
        out = asyncio.run(langchain_call(url, token, tool, args))
    elif sdk == "agents":
        out = asyncio.run(agents_call(url, token, tool, args, meta))
    elif sdk in ("readme-langchain", "readme-agents"):
        snippet = sys.stdin.read()
        out = asyncio.run(readme_call(sdk.removeprefix("readme-"), snippet, tool, args))
    else:
        raise SystemExit(f"unknown SDK {sdk!r}: langchain, agents, readme-langchain, readme-agents")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
