"""An agent loop whose tool calls act on a billing system exactly once, with no framework.

The "model" here is a script of tool calls (a real agent would ask an LLM for the next call);
the loop runs each call through a tool made idempotent by ``@oncebox.tool``. Half-way through,
the orchestrator "crashes" and starts the session again from the first step — as a restarted
LangGraph or Agents SDK run would replay its steps. The replayed calls find their recorded
outcomes: the receiver sees one effect per call, not two.

Run it against a running oncebox (a worker delivering ``create_invoice``):

    DATABASE_URL=postgres://... ONCEBOX_CONFIG=oncebox.toml python examples/python/agent_loop.py

or over the HTTP API with ``ONCEBOX_URL`` and ``ONCEBOX_TOKEN`` set instead. Options:
``--session`` (default: a new one each run) and ``--tenant`` (in-transaction only).
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import oncebox


@dataclass(frozen=True)
class ToolCall:
    """What the model asked for: a tool and its arguments."""

    tool: str
    arguments: dict[str, str]


def model(goal: str) -> Iterator[ToolCall]:
    """A stand-in for the LLM: the tool calls it would make for ``goal``, in order."""
    for n, amount in enumerate(("120.00", "35.50", "8.25"), start=1):
        yield ToolCall("invoice_customer", {"order_id": f"{goal}-{n}", "amount": amount})


def connect_tools(args: argparse.Namespace) -> dict[str, oncebox.Tool[...]]:
    """The agent's tools, made idempotent; ``via`` chooses how intents travel."""
    via: oncebox.Via | oncebox.Client
    if os.environ.get("ONCEBOX_URL"):
        via = oncebox.Client(os.environ["ONCEBOX_URL"], os.environ["ONCEBOX_TOKEN"])
    else:
        config = oncebox.Config.load(os.environ["ONCEBOX_CONFIG"])
        via = oncebox.Database(os.environ["DATABASE_URL"], tenant=args.tenant, config=config)

    @oncebox.tool("create_invoice", via=via, timeout=30)
    def invoice_customer(order_id: str, amount: str) -> dict[str, str]:
        """Bill the customer for an order (the action's arguments)."""
        return {"order_id": order_id, "amount": amount}

    return {"invoice_customer": invoice_customer}


class Crash(Exception):
    """The orchestrator dying mid-run."""


def run(session: str, tools: dict[str, oncebox.Tool[...]], crash_after: int | None) -> list[str]:
    """One run of the session from its first step; returns the outcome of each step."""
    outcomes = []
    for step, call in enumerate(model("order"), start=1):
        tool = tools[call.tool]
        try:
            intent = tool(session, step, **call.arguments)
            outcomes.append(
                f"step {step}: {call.tool} succeeded, key {intent.idempotency_key[:12]}"
            )
        except oncebox.NeedsReview as e:
            outcomes.append(f"step {step}: waiting for a person ({e.intent.idempotency_key[:12]})")
        except oncebox.NotSucceeded as e:
            outcomes.append(f"step {step}: {e.intent.status.value}")
        print(outcomes[-1], flush=True)
        if crash_after is not None and step == crash_after:
            raise Crash(f"crashed after step {step}")
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description="An agent loop with exactly-once tool calls.")
    parser.add_argument("--session", default=f"session-{uuid.uuid4().hex[:8]}")
    parser.add_argument("--tenant", default="tenant-42")
    args = parser.parse_args()
    tools = connect_tools(args)
    print(f"session {args.session}", flush=True)
    try:
        run(args.session, tools, crash_after=2)
    except Crash as crash:
        print(f"orchestrator {crash}; restarting the session from step 1", flush=True)
    outcomes = run(args.session, tools, crash_after=None)
    ok = all("succeeded" in o for o in outcomes)
    print("every step done once" if ok else "some steps did not succeed", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
