"""The Python guide's snippets (docs/python.md) and the package README's, executed as written
against a real database, worker, reference receiver and API: documentation that cannot drift."""

from __future__ import annotations

import re

import psycopg
import pytest

import oncebox
from conftest import REDACTION_KEYS, ROOT, Services


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, flags=re.S)


@pytest.fixture
def environment(services: Services, monkeypatch: pytest.MonkeyPatch) -> Services:
    services.receiver()
    services.worker()
    services.serve()
    assert services.config is not None
    monkeypatch.setenv("DATABASE_URL", services.db_url)
    monkeypatch.setenv("ONCEBOX_CONFIG", str(services.config))
    monkeypatch.setenv("ONCEBOX_REDACTION_KEYS", REDACTION_KEYS)
    monkeypatch.setenv("ONCEBOX_URL", services.api_url)
    monkeypatch.setenv("ONCEBOX_TOKEN", services.token("tenant-42"))
    with psycopg.connect(services.db_url) as conn:
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, invoicing boolean)")
        conn.execute("INSERT INTO orders VALUES (8172, false)")
    return services


def run_blocks(blocks: list[str], where: str) -> dict[str, object]:
    namespace: dict[str, object] = {"__name__": "__readme__"}
    for n, block in enumerate(blocks):
        code = compile(block, f"{where} block {n + 1}", "exec")
        exec(code, namespace)
    return namespace


def test_the_python_guide_runs(environment: Services) -> None:
    blocks = python_blocks((ROOT / "docs" / "python.md").read_text())
    assert len(blocks) == 4
    run_blocks(blocks, "docs/python.md")
    with psycopg.connect(environment.db_url) as conn:
        row = conn.execute("SELECT invoicing FROM orders WHERE id = 8172").fetchone()
    assert row == (True,)
    assert environment.effects("invoice-order-8173", "tenant-42") == 1
    done = oncebox.step_key(
        "run-7", 3, "create_invoice", {"order_id": "order-8174", "amount": "12.00"}
    )
    assert environment.effects(done, "tenant-42") == 1


def test_the_readme_python_snippet_runs(environment: Services) -> None:
    blocks = python_blocks((ROOT / "README.md").read_text())
    assert len(blocks) == 1
    setup = "import os\nimport psycopg\nimport oncebox\n"
    setup += 'intake = oncebox.Intake(oncebox.Config.load(os.environ["ONCEBOX_CONFIG"]))\n'
    run_blocks([setup, *blocks], "README.md")
    with psycopg.connect(environment.db_url) as conn:
        row = conn.execute("SELECT invoicing FROM orders WHERE id = 8172").fetchone()
        intents = conn.execute(
            "SELECT count(*) FROM oncebox.intents WHERE idempotency_key = 'invoice-order-8172'"
        ).fetchone()
    assert row == (True,)
    assert intents == (1,)


def test_the_package_readme_runs(environment: Services) -> None:
    blocks = python_blocks((ROOT / "python" / "README.md").read_text())
    assert len(blocks) >= 3
    run_blocks(blocks, "python/README.md")


def test_the_readme_lists_what_the_package_exports() -> None:
    text = (ROOT / "python" / "README.md").read_text()
    for name in ("submit", "Client", "AsyncClient", "tool", "Database", "KeyConflict"):
        assert f"`{name}" in text or f"oncebox.{name}" in text, name
