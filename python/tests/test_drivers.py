"""The same submit through psycopg's AsyncConnection and SQLAlchemy 2 (sync and async): the
intent commits or rolls back with the caller's own rows."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import oncebox
from conftest import REDACTION_KEYS, config_toml

INVOICE = {"order_id": "order-1", "amount": "1.00"}


@pytest.fixture
def intake() -> oncebox.Intake:
    return oncebox.Intake(oncebox.Config.from_toml(config_toml()), REDACTION_KEYS)


def sa_url(db_url: str) -> str:
    return db_url.replace("postgres://", "postgresql+psycopg://", 1)


def keys(db_url: str) -> list[str]:
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT idempotency_key FROM oncebox.intents i JOIN oncebox.outbox o"
            " ON o.intent_id = i.id ORDER BY 1"
        ).fetchall()
        return [r[0] for r in rows]


def orders(db_url: str) -> list[str]:
    with psycopg.connect(db_url) as conn:
        return [r[0] for r in conn.execute("SELECT id FROM orders ORDER BY 1").fetchall()]


@pytest.fixture
def with_orders(db_url: str) -> str:
    with psycopg.connect(db_url) as conn:
        conn.execute("CREATE TABLE orders (id text PRIMARY KEY)")
    return db_url


def test_psycopg_async_connection(with_orders: str, intake: oncebox.Intake) -> None:
    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(with_orders) as conn:
            await conn.execute("INSERT INTO orders VALUES ('kept')")
            s = await oncebox.submit_async(
                conn,
                tenant="t",
                key="kept",
                action="create_invoice",
                arguments=INVOICE,
                config=intake,
            )
            assert s.created
            await conn.commit()
            await conn.execute("INSERT INTO orders VALUES ('dropped')")
            await oncebox.submit_async(
                conn,
                tenant="t",
                key="dropped",
                action="create_invoice",
                arguments=INVOICE,
                config=intake,
            )
            await conn.rollback()
            again = await oncebox.submit_async(
                conn,
                tenant="t",
                key="kept",
                action="create_invoice",
                arguments=INVOICE,
                config=intake,
            )
            assert not again.created
            assert again.intent.id == s.intent.id

    asyncio.run(main())
    assert orders(with_orders) == ["kept"]
    assert keys(with_orders) == ["kept"]


def test_sqlalchemy_session_and_connection(with_orders: str, intake: oncebox.Intake) -> None:
    engine = create_engine(sa_url(with_orders))
    try:
        with Session(engine) as session:
            session.execute(text("INSERT INTO orders VALUES ('session')"))
            s = oncebox.submit(
                session,
                tenant="t",
                key="session",
                action="create_invoice",
                arguments=INVOICE,
                config=intake,
            )
            assert s.created
            session.commit()
        with Session(engine) as session:
            session.execute(text("INSERT INTO orders VALUES ('rolled-back')"))
            oncebox.submit(
                session,
                tenant="t",
                key="rolled-back",
                action="create_invoice",
                arguments=INVOICE,
                config=intake,
            )
            session.rollback()
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO orders VALUES ('connection')"))
            oncebox.submit(
                conn,
                tenant="t",
                key="connection",
                action="create_invoice",
                arguments=INVOICE,
                config=intake,
            )
        with Session(engine) as session, pytest.raises(oncebox.KeyConflict):
            oncebox.submit(
                session,
                tenant="t",
                key="session",
                action="create_invoice",
                arguments={"other": 1},
                config=intake,
            )
    finally:
        engine.dispose()
    assert orders(with_orders) == ["connection", "session"]
    assert keys(with_orders) == ["connection", "session"]


def test_sqlalchemy_async_session(with_orders: str, intake: oncebox.Intake) -> None:
    async def main() -> None:
        engine = create_async_engine(sa_url(with_orders))
        try:
            async with AsyncSession(engine) as session:
                await session.execute(text("INSERT INTO orders VALUES ('async')"))
                s = await oncebox.submit_async(
                    session,
                    tenant="t",
                    key="async",
                    action="create_invoice",
                    arguments=INVOICE,
                    config=intake,
                )
                assert s.created
                await session.commit()
            async with AsyncSession(engine) as session:
                await session.execute(text("INSERT INTO orders VALUES ('async-dropped')"))
                await oncebox.submit_async(
                    session,
                    tenant="t",
                    key="async-dropped",
                    action="create_invoice",
                    arguments=INVOICE,
                    config=intake,
                )
                await session.rollback()
            async with engine.begin() as conn:
                await oncebox.submit_async(
                    conn,
                    tenant="t",
                    key="async-conn",
                    action="create_invoice",
                    arguments=INVOICE,
                    config=intake,
                )
        finally:
            await engine.dispose()

    asyncio.run(main())
    assert orders(with_orders) == ["async"]
    assert keys(with_orders) == ["async", "async-conn"]


def test_an_unsupported_connection_is_refused(intake: oncebox.Intake) -> None:
    with pytest.raises(TypeError, match="psycopg Connection"):
        oncebox.submit(
            object(),  # type: ignore[arg-type]
            tenant="t",
            key="k",
            action="create_invoice",
            arguments=INVOICE,
            config=intake,
        )
    with pytest.raises(TypeError, match="psycopg AsyncConnection"):
        asyncio.run(
            oncebox.submit_async(
                object(),  # type: ignore[arg-type]
                tenant="t",
                key="k",
                action="create_invoice",
                arguments=INVOICE,
                config=intake,
            )
        )


def test_each_submit_refuses_the_other_kind_of_connection(
    with_orders: str, intake: oncebox.Intake
) -> None:
    """``submit`` is synchronous and ``submit_async`` a coroutine, whatever the connection: each
    refuses the other kind with the name of the one to call, and writes nothing."""

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(with_orders) as conn:
            with pytest.raises(TypeError, match=r"use `await oncebox\.submit_async"):
                oncebox.submit(
                    conn,  # type: ignore[arg-type]
                    tenant="t",
                    key="async-to-sync",
                    action="create_invoice",
                    arguments=INVOICE,
                    config=intake,
                )
            await conn.commit()

    asyncio.run(main())
    with psycopg.connect(with_orders) as conn:
        pending = oncebox.submit_async(
            conn,  # type: ignore[arg-type]
            tenant="t",
            key="sync-to-async",
            action="create_invoice",
            arguments=INVOICE,
            config=intake,
        )
        with pytest.raises(TypeError, match=r"oncebox\.submit\)"):
            asyncio.run(pending)
        conn.commit()
    assert keys(with_orders) == []
