"""In-transaction submit from Python, on a real Postgres: the Rust store's statement, in the
caller's transaction, with the Rust store's semantics."""

from __future__ import annotations

import json
import subprocess
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import oncebox
from conftest import REDACTION_KEYS, config_toml, with_refund_policy

INVOICE = {"order_id": "order-8172", "amount": "125.00"}


@pytest.fixture
def intake() -> oncebox.Intake:
    return oncebox.Intake(oncebox.Config.from_toml(config_toml()), REDACTION_KEYS)


def count(url: str, table: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT count(*) FROM oncebox.{table}").fetchone()
        assert row is not None
        return int(row[0])


def test_submit_commits_with_the_callers_row_and_replays(
    db_url: str, intake: oncebox.Intake
) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute("CREATE TABLE orders (id text PRIMARY KEY)")
        conn.commit()
        conn.execute("INSERT INTO orders VALUES ('order-8172')")
        first = oncebox.submit(
            conn,
            tenant="acme",
            key="order-8172:invoice",
            action="create_invoice",
            arguments=INVOICE,
            business_ref="order-8172",
            config=intake,
        )
        assert first.created
        assert first.intent.status is oncebox.Status.PENDING
        # Not visible to anyone else before the caller commits.
        assert count(db_url, "intents") == 0
        conn.commit()
    with psycopg.connect(db_url) as other:
        orders = other.execute("SELECT count(*) FROM orders").fetchone()
        assert orders == (1,)
    assert count(db_url, "intents") == 1
    assert count(db_url, "outbox") == 1
    with psycopg.connect(db_url) as conn:
        again = oncebox.submit(
            conn,
            tenant="acme",
            key="order-8172:invoice",
            action="create_invoice",
            arguments=dict(reversed(list(INVOICE.items()))),
            business_ref="order-8172",
            config=intake,
        )
        conn.commit()
    assert not again.created
    assert again.intent.id == first.intent.id
    assert again.intent.request_hash == first.intent.request_hash
    assert again.intent.created_at == first.intent.created_at
    assert count(db_url, "intents") == 1


def test_rollback_writes_nothing(db_url: str, intake: oncebox.Intake) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute("CREATE TABLE orders (id text PRIMARY KEY)")
        conn.commit()
        conn.execute("INSERT INTO orders VALUES ('o1')")
        oncebox.submit(
            conn,
            tenant="acme",
            key="o1",
            action="create_invoice",
            arguments=INVOICE,
            config=intake,
        )
        conn.rollback()
        assert conn.execute("SELECT count(*) FROM orders").fetchone() == (0,)
    assert count(db_url, "intents") == 0
    assert count(db_url, "outbox") == 0


def test_a_conflict_raises_with_both_hashes_and_writes_nothing(
    db_url: str, intake: oncebox.Intake
) -> None:
    with psycopg.connect(db_url) as conn:
        first = oncebox.submit(
            conn,
            tenant="acme",
            key="k",
            action="create_invoice",
            arguments=INVOICE,
            config=intake,
        )
        conn.commit()
        with pytest.raises(oncebox.KeyConflict) as e:
            oncebox.submit(
                conn,
                tenant="acme",
                key="k",
                action="create_invoice",
                arguments={**INVOICE, "amount": "999.00"},
                config=intake,
            )
        assert e.value.existing_hash == first.intent.request_hash
        assert e.value.submitted_hash != first.intent.request_hash
        assert e.value.existing_id == first.intent.id
        # The caller's transaction is still usable, and nothing was added.
        conn.commit()
    assert count(db_url, "intents") == 1
    assert count(db_url, "outbox") == 1


def test_bad_input_names_the_field_before_any_statement(
    db_url: str, intake: oncebox.Intake
) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"key": "has space"}, "idempotency_key"),
        ({"tenant": ""}, "tenant_id"),
        ({"action": "refund"}, "action"),
        ({"arguments": {"amount": 2**60}}, "arguments/amount"),
        ({"arguments": ["not", "an", "object"]}, "arguments"),
        ({"arguments": {"memo": "nul\x00"}}, "arguments/memo"),
        ({"deadline": datetime(2030, 1, 1)}, "deadline"),
        # The action's JSON Schema (the Rust core enforces it on every intake path).
        ({"action": "pay_out", "arguments": {"amount": 5}}, "arguments/amount"),
        ({"action": "pay_out", "arguments": {}}, "arguments"),
    ]
    with psycopg.connect(db_url) as conn:
        for change, field in cases:
            call: dict[str, Any] = {
                "tenant": "acme",
                "key": "k",
                "action": "create_invoice",
                "arguments": INVOICE,
                **change,
            }
            with pytest.raises(oncebox.InvalidIntent) as e:
                oncebox.submit(conn, config=intake, **call)
            assert e.value.field == field, (change, e.value)
        # Nothing ran: the transaction has not even begun.
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert count(db_url, "intents") == 0


def test_tenants_are_independent(db_url: str, intake: oncebox.Intake) -> None:
    with psycopg.connect(db_url) as conn:
        a = oncebox.submit(
            conn, tenant="a", key="k", action="create_invoice", arguments=INVOICE, config=intake
        )
        b = oncebox.submit(
            conn,
            tenant="b",
            key="k",
            action="create_invoice",
            arguments={"other": True},
            config=intake,
        )
        conn.commit()
    assert a.created
    assert b.created
    assert a.intent.id != b.intent.id
    assert count(db_url, "intents") == 2


def test_32_threads_submitting_one_key_make_one_row_and_32_answers_naming_it(
    db_url: str, intake: oncebox.Intake
) -> None:
    barrier = threading.Barrier(32)
    answers: list[oncebox.Submitted] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def one() -> None:
        try:
            with psycopg.connect(db_url) as conn:
                barrier.wait()
                s = oncebox.submit(
                    conn,
                    tenant="acme",
                    key="same",
                    action="create_invoice",
                    arguments=INVOICE,
                    config=intake,
                )
                conn.commit()
            with lock:
                answers.append(s)
        except BaseException as e:
            with lock:
                errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(answers) == 32
    assert sum(a.created for a in answers) == 1
    assert len({a.intent.id for a in answers}) == 1
    assert count(db_url, "intents") == 1
    assert count(db_url, "outbox") == 1


def rust_submit(oncebox_bin: Path, db_url: str, config: Path, tenant: str, *extra: str) -> None:
    """``oncebox submit`` of tenant ``tenant`` with ``extra`` arguments (ending with the key)."""
    subprocess.run(
        [
            oncebox_bin,
            "submit",
            "--database-url",
            db_url,
            "--config",
            str(config),
            "--tenant",
            tenant,
            *extra,
        ],
        check=True,
        capture_output=True,
        env={"ONCEBOX_REDACTION_KEYS": REDACTION_KEYS, "PATH": "/usr/bin:/bin"},
    )


def sent_statements(conn: psycopg.Connection[Any]) -> list[str]:
    """The text of every statement this connection prepared: with ``prepare_threshold=0``,
    every statement it sent, as the server received it."""
    return [r[0] for r in conn.execute("SELECT statement FROM pg_prepared_statements").fetchall()]


def test_python_and_rust_write_identical_rows_with_the_same_statement_text(
    db_url: str, intake: oncebox.Intake, oncebox_bin: Path, tmp_path: Path
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(config_toml())
    arguments = {"card": "4111111111111111", "cvv": "123", "amount": "5.00"}
    deadline = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=2)))
    rust_submit(
        oncebox_bin,
        db_url,
        config,
        "rust",
        "--action",
        "charge_card",
        "--arguments",
        json.dumps(arguments),
        "--business-ref",
        "b",
        "--run-id",
        "r",
        "--step",
        "s",
        "--deadline",
        deadline.isoformat(),
        "k",
    )
    # Every statement prepared (prepare_threshold=0): the server keeps the text it received
    # from oncebox.submit() itself.
    with psycopg.connect(db_url, prepare_threshold=0) as conn:
        oncebox.submit(
            conn,
            tenant="python",
            key="k",
            action="charge_card",
            arguments=arguments,
            business_ref="b",
            run_id="r",
            step="s",
            deadline=deadline,
            config=intake,
        )
        conn.commit()
        statements = sent_statements(conn)
    assert oncebox._native.SUBMIT in statements, "oncebox.submit() sent the Rust store's text"

    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        rows = conn.execute(
            "SELECT i.*, o.phase, o.arguments, o.attempt, o.epoch, o.budget_from IS NULL AS nb"
            " FROM oncebox.intents i JOIN oncebox.outbox o ON o.intent_id = i.id"
            " ORDER BY i.tenant_id"
        ).fetchall()
    assert [r["tenant_id"] for r in rows] == ["python", "rust"]
    volatile = {"id", "tenant_id", "created_at", "updated_at"}
    python_row, rust_row = ({k: v for k, v in r.items() if k not in volatile} for r in rows)
    assert python_row == rust_row
    assert python_row["redacted"] is True
    assert python_row["arguments"] == arguments, "the originals travel on the outbox row only"
    assert "cvv" not in python_row["payload"]


def test_an_ordered_submit_writes_rusts_rows_with_rusts_statement_text(
    db_url: str, intake: oncebox.Intake, oncebox_bin: Path, tmp_path: Path
) -> None:
    """Every one of the ordered submit's fifteen parameters lands where Rust's does: two lanes
    of two intents each, one from each language, compared column by column — the journal, the
    outbox and the lane."""
    config = tmp_path / "c.toml"
    config.write_text(config_toml())
    arguments = {"card": "4111111111111111", "cvv": "123", "amount": "5.00"}
    deadline = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=2)))
    for n in (1, 2):
        rust_submit(
            oncebox_bin,
            db_url,
            config,
            "rust",
            "--action",
            "charge_card",
            "--arguments",
            json.dumps({**arguments, "n": n}),
            "--business-ref",
            "b",
            "--run-id",
            "r",
            "--step",
            "s",
            "--deadline",
            deadline.isoformat(),
            "--ordering-key",
            "account-7",
            f"k-{n}",
        )
    with psycopg.connect(db_url, prepare_threshold=0) as conn:
        for n in (1, 2):
            oncebox.submit(
                conn,
                tenant="python",
                key=f"k-{n}",
                action="charge_card",
                arguments={**arguments, "n": n},
                ordering_key="account-7",
                config=intake,
                business_ref="b",
                run_id="r",
                step="s",
                deadline=deadline,
            )
            conn.commit()
        statements = sent_statements(conn)
    assert oncebox._native.SUBMIT_ORDERED in statements, "oncebox.submit() sent Rust's text"

    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        rows = conn.execute(
            "SELECT i.*, o.phase, o.arguments, o.attempt, o.epoch, o.budget_from IS NULL AS nb,"
            " o.available_at = 'infinity' AS parked, l.ordering_key AS lane_key,"
            " l.destination, l.skip_failed, l.last_seq, l.head_seq"
            " FROM oncebox.intents i JOIN oncebox.outbox o ON o.intent_id = i.id"
            " JOIN oncebox.lanes l ON l.id = i.lane_id ORDER BY i.tenant_id, i.lane_seq"
        ).fetchall()
    assert [(r["tenant_id"], r["idempotency_key"]) for r in rows] == [
        ("python", "k-1"),
        ("python", "k-2"),
        ("rust", "k-1"),
        ("rust", "k-2"),
    ]
    volatile = {"id", "tenant_id", "created_at", "updated_at", "lane_id"}
    python_rows, rust_rows = (
        [{k: v for k, v in r.items() if k not in volatile} for r in rows[i : i + 2]] for i in (0, 2)
    )
    assert python_rows == rust_rows
    first, second = python_rows
    assert (first["lane_seq"], first["parked"]) == (1, False), "the head is ready"
    assert (second["lane_seq"], second["parked"]) == (2, True), "the next waits behind it"
    assert first["ordering_key"] == first["lane_key"] == "account-7"
    assert (first["destination"], first["last_seq"]) == ("billing", 2)
    assert first["redacted"] is True
    assert first["arguments"]["cvv"] == "123"
    assert first["deadline"] == deadline
    assert first["run_id"] == "r"


def test_an_ordering_key_joins_one_lane_from_python_and_rust(
    db_url: str, intake: oncebox.Intake, oncebox_bin: Path, tmp_path: Path
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(config_toml())
    subprocess.run(
        [
            oncebox_bin,
            "submit",
            "--database-url",
            db_url,
            "--config",
            str(config),
            "--tenant",
            "acme",
            "--action",
            "create_invoice",
            "--arguments",
            json.dumps(INVOICE),
            "--ordering-key",
            "order-8172",
            "rust-1",
        ],
        check=True,
        capture_output=True,
        env={"ONCEBOX_REDACTION_KEYS": REDACTION_KEYS, "PATH": "/usr/bin:/bin"},
    )
    with psycopg.connect(db_url) as conn:
        second = oncebox.submit(
            conn,
            tenant="acme",
            key="py-2",
            action="create_invoice",
            arguments=INVOICE,
            ordering_key="order-8172",
            config=intake,
        )
        conn.commit()
        again = oncebox.submit(
            conn,
            tenant="acme",
            key="py-2",
            action="create_invoice",
            arguments=INVOICE,
            ordering_key="order-8172",
            config=intake,
        )
        conn.commit()
        with pytest.raises(oncebox.InvalidIntent) as e:
            oncebox.submit(
                conn,
                tenant="acme",
                key="py-3",
                action="create_invoice",
                arguments=INVOICE,
                ordering_key="",
                config=intake,
            )
        assert e.value.field == "ordering_key"
        conn.rollback()
        rows = conn.execute(
            "SELECT i.idempotency_key, i.ordering_key, i.lane_seq, l.destination,"
            " o.available_at = 'infinity' AS parked"
            " FROM oncebox.intents i JOIN oncebox.outbox o ON o.intent_id = i.id"
            " JOIN oncebox.lanes l ON l.id = i.lane_id ORDER BY i.lane_seq"
        ).fetchall()
        last = conn.execute("SELECT last_seq FROM oncebox.lanes").fetchone()
    assert second.created
    assert second.intent.ordering_key == "order-8172"
    assert not again.created
    assert again.intent.ordering_key == "order-8172"
    assert rows == [
        ("rust-1", "order-8172", 1, "billing", False),
        ("py-2", "order-8172", 2, "billing", True),
    ], "Python's intent waits behind Rust's in the same lane"
    assert last == (2,), "the replay took no number"


def test_python_and_rust_hold_an_action_with_a_policy_alike(
    db_url: str, oncebox_bin: Path, tmp_path: Path
) -> None:
    """An action with an approval policy: a refund the policy matches is written
    awaiting_approval with the number of approvals, its window and an ask row; one it does not
    match is written pending — the same rows from Python as from the CLI."""
    config = tmp_path / "c.toml"
    config.write_text(config_toml())
    with_refund_policy(config)
    policy = oncebox.Intake(oncebox.Config.from_toml(config.read_text()), REDACTION_KEYS)
    refunds = {"big": {"amount": "5000"}, "small": {"amount": "10"}}
    for key, arguments in refunds.items():
        rust_submit(
            oncebox_bin, db_url, config, "rust", "--action", "refund",
            "--arguments", json.dumps(arguments), key,
        )  # fmt: skip
        with psycopg.connect(db_url) as conn:
            oncebox.submit(
                conn, tenant="python", key=key, action="refund", arguments=arguments, config=policy
            )
            conn.commit()
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        rows = conn.execute(
            "SELECT i.tenant_id, i.idempotency_key, to_jsonb(i) - 'id' - 'tenant_id'"
            "   - 'created_at' - 'updated_at' - 'approval_expires_at' AS intent,"
            " extract(epoch FROM i.approval_expires_at - i.created_at)::int AS approval_window,"
            " (SELECT jsonb_agg(o.phase ORDER BY o.phase) FROM oncebox.outbox o"
            "   WHERE o.intent_id = i.id) AS phases"
            " FROM oncebox.intents i ORDER BY i.idempotency_key, i.tenant_id"
        ).fetchall()
    by = {(r["tenant_id"], r["idempotency_key"]): r for r in rows}
    for key in refunds:
        python_row, rust_row = by[("python", key)], by[("rust", key)]
        for r in (python_row, rust_row):
            del r["tenant_id"]
        assert python_row == rust_row, key
    big, small = by[("python", "big")], by[("python", "small")]
    assert big["intent"]["status"] == "awaiting_approval"
    assert big["intent"]["approvals_needed"] == 2
    assert big["approval_window"] == 86400
    assert big["phases"] == ["deliver", "ask"]
    assert small["intent"]["status"] == "pending"
    assert small["intent"]["approvals_needed"] is None
    assert small["approval_window"] is None
    assert small["phases"] == ["deliver"]
