"""Approvals from Python: the same policy gives the same status on every way in, and the tool
wrapper tells "waiting for people" and "rejected" apart from slow and failed."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest

import oncebox
from conftest import REDACTION_KEYS, Services, config_toml, with_refund_policy

#: Amounts and whether a refund of them waits for people (1,000 or more, compared exactly).
AMOUNTS: list[tuple[Any, oncebox.Status]] = [
    ("999.99", oncebox.Status.PENDING),
    ("1000", oncebox.Status.AWAITING_APPROVAL),
    ("1000.00", oncebox.Status.AWAITING_APPROVAL),
    ("999.9999999999999999999", oncebox.Status.PENDING),
    (5000, oncebox.Status.AWAITING_APPROVAL),
    (50, oncebox.Status.PENDING),
]


def submitted_by(db_url: str, key: str) -> str | None:
    """Who the journal says submitted ``key``."""
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT submitted_by FROM oncebox.intents WHERE idempotency_key = %s", (key,)
        ).fetchone()
    assert row is not None, key
    return None if row[0] is None else str(row[0])


def stored_status(db_url: str, key: str) -> str:
    """The intent's status, checked against its outbox rows: one waiting for approval has an
    `ask` row (its "approval requested" message) beside its deliver row, any other none."""
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT i.status::text, array_agg(o.phase::text ORDER BY o.phase) "
            "FROM oncebox.intents i JOIN oncebox.outbox o ON o.intent_id = i.id "
            "WHERE i.idempotency_key = %s GROUP BY i.status",
            (key,),
        ).fetchone()
        assert row is not None, key
        status, phases = str(row[0]), list(row[1])
        waits = status == "awaiting_approval"
        assert phases == (["deliver", "ask"] if waits else ["deliver"]), (key, phases)
        return status


def test_the_same_policy_gives_the_same_status_on_every_way_in(services: Services) -> None:
    config = with_refund_policy(services.config_file())
    intake = oncebox.Intake(oncebox.Config.load(config), REDACTION_KEYS)
    api = services.serve()
    token = services.token("acme")
    with oncebox.Client(api, token) as client:
        for i, (amount, expected) in enumerate(AMOUNTS):
            arguments = {"amount": amount}
            with psycopg.connect(services.db_url) as conn:
                py = oncebox.submit(
                    conn,
                    tenant="acme",
                    key=f"py-{i}",
                    action="refund",
                    arguments=arguments,
                    config=intake,
                )
                conn.commit()
            assert py.intent.status is expected, (amount, "python")
            cli = subprocess.run(
                [
                    str(services.bin),
                    "submit",
                    "--json",
                    "--config",
                    str(config),
                    "--tenant",
                    "acme",
                    "--action",
                    "refund",
                    "--arguments",
                    json.dumps(arguments),
                    "--principal",
                    "billing-cron",
                    f"cli-{i}",
                ],
                env={
                    **os.environ,
                    "DATABASE_URL": services.db_url,
                    "ONCEBOX_REDACTION_KEYS": REDACTION_KEYS,
                },
                check=True,
                capture_output=True,
            )
            assert json.loads(cli.stdout)["intent"]["status"] == expected.value, (amount, "cli")
            over_http = client.submit(f"api-{i}", "refund", arguments)
            assert over_http.intent.status is expected, (amount, "api")
            for way in ("py", "cli", "api"):
                assert stored_status(services.db_url, f"{way}-{i}") == expected.value
            # Every way in records who submitted: the database role when the Python intake
            # names no principal, the CLI's --principal, the API token (a principal of its own).
            assert submitted_by(services.db_url, f"py-{i}") == "db:postgres"
            assert submitted_by(services.db_url, f"cli-{i}") == "user:billing-cron"
            assert (submitted_by(services.db_url, f"api-{i}") or "").startswith("token:")


def test_the_tool_raises_awaiting_approval_then_the_decision(services: Services) -> None:
    services.receiver()
    assert services.config is not None
    with_refund_policy(services.config)
    services.serve()
    intake = oncebox.Intake(
        oncebox.Config.load(services.config), REDACTION_KEYS, principal="refund-agent"
    )
    via = oncebox.Database(services.db_url, tenant="acme", config=intake)

    @oncebox.tool("refund", via=via, timeout=30)
    def refund(order_id: str, amount: str) -> Mapping[str, object]:
        return {"order_id": order_id, "amount": amount}

    # Waiting for people is no timeout: the wrapper says so at once, however long it may wait.
    with pytest.raises(oncebox.AwaitingApproval) as waiting:
        refund("s", 1, order_id="o1", amount="5000.00")
    assert waiting.value.intent.status is oncebox.Status.AWAITING_APPROVAL
    key = refund.key("s", 1, order_id="o1", amount="5000.00")
    ana = services.token("acme", role="ops", holder="ana@example.com")
    rejected = services.decide(ana, "reject", key, "--reason", "not owed")
    assert rejected.returncode == 0, rejected.stderr
    with pytest.raises(oncebox.Rejected) as no:
        refund("s", 1, order_id="o1", amount="5000.00")
    assert no.value.intent.status is oncebox.Status.REJECTED

    services.worker()
    with pytest.raises(oncebox.AwaitingApproval):
        refund("s", 2, order_id="o2", amount="1200")
    key = refund.key("s", 2, order_id="o2", amount="1200")
    # The intake's principal submitted it: a token of that holder may not approve it.
    assert submitted_by(services.db_url, key) == "user:refund-agent"
    agent = services.token("acme", role="ops", holder="refund-agent")
    own = services.decide(agent, "approve", key)
    assert own.returncode == 3, own.stderr
    assert b"someone else must approve it" in own.stderr, own.stderr
    for person in ("ana", "bo"):
        token = services.token("acme", role="ops", holder=f"{person}@example.com")
        approved = services.decide(token, "approve", key, "--reason", f"checked by {person}")
        assert approved.returncode == 0, approved.stderr
    done = refund("s", 2, order_id="o2", amount="1200")
    assert done.status is oncebox.Status.SUCCEEDED
    assert services.effects(key) == 1
    # Below the policy's bound: no wait at all.
    small = refund("s", 3, order_id="o3", amount="50")
    assert small.status is oncebox.Status.SUCCEEDED


def test_prepared_says_what_the_policy_asks(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(config_toml())
    config = with_refund_policy(tmp_path / "c.toml")
    intake = oncebox.Intake(oncebox.Config.load(config), REDACTION_KEYS)
    asked = intake.prepare(tenant="t", key="k", action="refund", arguments={"amount": "1000"})
    assert (asked.approvals, asked.approval_window) == (2, 86400.0)
    free = intake.prepare(tenant="t", key="k", action="refund", arguments={"amount": "10"})
    assert (free.approvals, free.approval_window) == (None, None)


def test_a_principal_that_cannot_be_one_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(config_toml())
    config = oncebox.Config.load(tmp_path / "c.toml")
    for bad in ("", " ana", "ana ", "a\x00b", "a\nb", "x" * 256):
        with pytest.raises(oncebox.InvalidIntent) as refused:
            oncebox.Intake(config, REDACTION_KEYS, principal=bad)
        assert refused.value.field == "principal", bad
    assert oncebox.Intake(config, REDACTION_KEYS, principal="ana@example.com").principal == (
        "user:ana@example.com"
    )
