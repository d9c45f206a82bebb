"""The web console in a real browser: Debian's Chromium (``/usr/bin/chromium``, headless), driven
by Playwright's Python package — never a browser Playwright downloads — against the real
``oncebox serve``, worker, receiver and Postgres.

An operator logs in with an ops token, finds the ``needs_review`` intent a real worker produced
(its answer was lost at a destination that cannot be asked), resolves it with a reason, and sees
its status and the audit row; an agent token is refused at login; a POST without the CSRF token
is refused. Every page is screenshotted under ``target/console-screenshots/`` for people to look
at, and no page may log a console error (a CSP violation would be one).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright

from conftest import ROOT, Services

CHROMIUM = Path(os.environ.get("ONCEBOX_CHROMIUM", "/usr/bin/chromium"))
SHOTS = ROOT / "target" / "console-screenshots"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (scripts/test-tools.sh)")
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=["--headless", "--no-sandbox", "--disable-gpu"],
        )
        try:
            yield b
        finally:
            b.close()


def status_of(db_url: str, key: str) -> str:
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT status::text FROM oncebox.intents WHERE idempotency_key = %s", (key,)
        ).fetchone()
    assert row is not None, key
    return str(row[0])


def wait_for_status(db_url: str, key: str, want: str) -> None:
    """Until the worker has taken ``key`` to ``want`` (a deadline, not a sleep that hides a
    race: the state is read each time)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if status_of(db_url, key) == want:
            return
        time.sleep(0.1)
    raise AssertionError(f"{key} did not reach {want}: {status_of(db_url, key)}")


class Watched:
    """A page whose console errors and failed requests are collected."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        page.on(
            "requestfailed",
            lambda r: self.errors.append(f"request failed: {r.url} {r.failure}"),
        )

    def _console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            self.errors.append(f"console {message.type}: {message.text}")

    def shot(self, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
        assert self.errors == [], f"{name}: {self.errors}"


def test_an_operator_resolves_a_needs_review_intent_in_the_browser(
    services: Services, browser: Browser
) -> None:
    services.receiver()
    services.worker()
    base = services.serve()
    agent = services.token("acme")
    ops = services.token("acme", role="ops")
    headers = {"Authorization": f"Bearer {agent}"}
    # A wire transfer whose answer is lost: the bank cannot be asked, so it needs a person.
    lost = {"action": "wire_transfer", "arguments": {"order_id": "o-77", "faults": ["drop"]}}
    r = httpx.post(
        f"{base}/v1/intents",
        json={**lost, "business_ref": "PO-77"},
        headers={**headers, "Idempotency-Key": "wire-77"},
    )
    assert r.status_code == 202, r.text
    # Some ordinary traffic for the overview's chart.
    for n in range(5):
        ok = {"action": "create_invoice", "arguments": {"order_id": f"o-{n}"}}
        r = httpx.post(
            f"{base}/v1/intents", json=ok, headers={**headers, "Idempotency-Key": f"inv-{n}"}
        )
        assert r.status_code == 202, r.text
    wait_for_status(services.db_url, "wire-77", "needs_review")
    for n in range(5):
        wait_for_status(services.db_url, f"inv-{n}", "succeeded")
    assert services.effects("wire-77") == 1, "the bank executed it once; only the answer was lost"

    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = Watched(context.new_page())

    # Not logged in: the console sends the browser to the login page.
    page.page.goto(f"{base}/console")
    assert page.page.url.endswith("/console/login")
    page.shot("01-login")

    # Log in with the ops token.
    page.page.fill("#token", ops)
    page.page.click("button:has-text('Log in')")
    page.page.wait_for_url(f"{base}/console")
    assert page.page.locator("h1").inner_text() == "Overview"
    assert "need review" in page.page.inner_text(".tiles")
    assert page.page.locator("figure.chart svg rect").count() > 0, "the chart has bars"
    assert page.page.locator("text=Workers").count() > 0
    page.shot("02-overview")

    # Needs a person: the intent is listed; filter it by destination.
    page.page.click("nav >> text=Needs a person")
    page.page.select_option("select[name=destination]", "bank")
    page.page.click("button:has-text('Filter')")
    row = page.page.locator("table.intents tbody tr", has_text="wire-77")
    assert row.count() == 1
    assert "needs_review" in row.inner_text()
    page.shot("03-needs-a-person")

    # The intent page: its history and the decisions its status allows.
    row.locator("a").click()
    page.page.wait_for_url("**/console/intents/wire-77")
    history = page.page.inner_text("table.history")
    assert "deliver" in history, history
    assert "unknown" in history, history
    assert "PO-77" in page.page.inner_text("dl.facts")
    page.shot("04-intent-needs-review")

    # Resolve it as succeeded, with the bank's reference and a reason.
    resolve = page.page.locator("form", has=page.page.locator("h3", has_text="Resolve"))
    resolve.locator("input[value=succeeded]").check()
    resolve.locator("input[name=reference]").fill("BANK-REF-77")
    resolve.locator("textarea[name=reason]").fill("Bank statement shows the transfer on 1 Dec")
    resolve.locator("button[type=submit]").click()
    page.page.wait_for_url("**/console/intents/wire-77?done=resolve")
    assert "succeeded" in page.page.inner_text("dl.facts")
    audit = page.page.inner_text("table.audit")
    assert "Bank statement shows the transfer on 1 Dec" in audit, audit
    assert "console" in audit, audit
    assert "resolve" in audit, audit
    page.shot("05-intent-resolved")
    assert status_of(services.db_url, "wire-77") == "succeeded"

    # Search by business reference finds it.
    page.page.fill("header input[name=q]", "PO-77")
    page.page.press("header input[name=q]", "Enter")
    page.page.wait_for_url("**/console/intents/wire-77")
    page.shot("06-search")

    # A POST without the CSRF token, from this very logged-in browser, is refused.
    refused = context.request.post(
        f"{base}/console/intents/inv-1/retry",
        form={"reason": "no csrf"},
        max_redirects=0,
    )
    assert refused.status == 403, refused.text()
    assert status_of(services.db_url, "inv-1") == "succeeded"
    context.close()

    # An agent token is refused at login.
    context = browser.new_context(viewport={"width": 1360, "height": 700})
    page = Watched(context.new_page())
    page.page.goto(f"{base}/console/login")
    page.page.fill("#token", agent)
    page.page.click("button:has-text('Log in')")
    assert "agent token" in page.page.inner_text(".error")
    # The refusal's 403 is the page's own status, not an error of the page.
    page.errors = [e for e in page.errors if "403" not in e]
    page.shot("07-agent-refused")
    assert all(c["name"] != "oncebox_session" for c in context.cookies()), context.cookies()
    context.close()


def test_an_agents_large_refund_waits_for_two_people_then_is_sent_once(
    services: Services, browser: Browser
) -> None:
    """Through /mcp an agent asks for a refund of 5,000 under a two-approver policy: the tool
    result says it awaits approval and gives the key; no request reaches the receiver (which
    executes every request it gets) while it waits; the token that submitted it may not approve
    it; one person approves in the console, a second with the CLI; then the receiver sees
    exactly one request, and the audit names both people with their reasons."""
    import asyncio
    import concurrent.futures
    import subprocess

    from conftest import with_refund_policy
    from test_mcp import over_http, structured

    services.receiver()
    assert services.config is not None
    with_refund_policy(services.config)
    services.worker()
    base = services.serve()
    # The agent platform's token: it submits.
    bot = services.token("acme", role="ops", holder="agent-platform")
    ana = services.token("acme", role="ops", holder="ana@example.com", label="ana")
    bo = services.token("acme", role="ops", holder="bo@example.com")

    async def call(arguments: dict[str, str]) -> dict[str, object]:
        async with over_http(base, bot) as mcp:
            return structured(await mcp.call_tool("refund", arguments))

    def ask(arguments: dict[str, str]) -> dict[str, object]:
        # Playwright's sync API runs an event loop in this thread: the MCP client gets its own.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, call(arguments)).result()

    answer = ask({"order_id": "o-5000", "amount": "5000.00"})
    assert answer["status"] == "awaiting_approval", answer
    assert "awaits approval" in str(answer["note"]), answer
    key = str(answer["idempotency_key"])
    # A small refund under the same policy goes straight through, past the waiting one.
    small = ask({"order_id": "o-50", "amount": "50.00"})
    wait_for_status(services.db_url, str(small["idempotency_key"]), "succeeded")
    assert services.effects(key) == 0, "sent before anyone approved it"

    # The token that submitted it may not approve it.
    own = httpx.post(
        f"{base}/v1/ops/intents/{key}/approve",
        json={"reason": "looks fine to me"},
        headers={"Authorization": f"Bearer {bot}"},
    )
    assert own.status_code == 409, own.text
    assert "someone else must approve it" in own.json()["detail"]

    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = Watched(context.new_page())
    page.page.goto(f"{base}/console/login")
    page.page.fill("#token", ana)
    page.page.click("button:has-text('Log in')")
    page.page.wait_for_url(f"{base}/console")
    # Awaiting approval comes first in the navigation.
    assert page.page.locator("header nav a").first.inner_text() == "Awaiting approval"
    page.page.click("nav >> text=Awaiting approval")
    row = page.page.locator("table.intents tbody tr", has_text=key)
    assert row.count() == 1
    assert "5000.00" in row.inner_text()
    assert "0 of 2" in row.inner_text()
    page.shot("08-awaiting-approval")
    row.locator("a").click()
    page.page.wait_for_url(f"**/console/intents/{key}")
    assert "awaiting_approval" in page.page.inner_text("dl.facts")
    page.shot("09-intent-awaiting-approval")
    # The fields as the receiver will get them: shown to an approver, the view audited.
    page.page.click("button:has-text('Show the fields as they will execute')")
    page.page.wait_for_url(f"**/console/intents/{key}/originals")
    assert "5000.00" in page.page.inner_text("table.originals")
    page.shot("09b-as-it-will-execute")
    page.page.click("text=Back to the intent")
    approve = page.page.locator("form", has=page.page.locator("h3", has_text="Approve"))
    approve.locator("textarea[name=reason]").fill("Customer's return received in full")
    approve.locator("button[type=submit]").click()
    page.page.wait_for_url(f"**/console/intents/{key}?done=approve")
    assert "awaiting_approval" in page.page.inner_text("dl.facts"), "one of two approvals"
    assert "1 of 2 approvals" in page.page.inner_text("section.decide")
    page.shot("10-intent-one-approval")
    context.close()
    assert services.effects(key) == 0, "sent after one approval of two"

    # Ana's approval counts once, whichever of her tokens asks again.
    ana_again = services.token("acme", role="ops", holder="ana@example.com")
    again = services.decide(ana_again, "approve", key)
    assert again.returncode == 3, again.stderr
    assert b"one person counts once" in again.stderr, again.stderr
    cli = services.decide(bo, "approve", key, "--reason", "Refund matches the invoice")
    assert cli.returncode == 0, cli.stderr
    wait_for_status(services.db_url, key, "succeeded")
    assert services.effects(key) == 1, "exactly one request once approved"

    audit = subprocess.run(
        [str(services.bin), "ops", "audit", "--key", key, "--json"],
        env={**os.environ, "DATABASE_URL": services.db_url},
        check=True,
        capture_output=True,
    )
    import json

    rows = [
        (r["actor"], r["label"], r["via"], r["action"], r["reason"])
        for r in reversed(json.loads(audit.stdout))
    ]
    assert [r[1:] for r in rows] == [
        ("ana", "console", "view", "viewed the arguments as they will execute"),
        ("ana", "console", "approve", "Customer's return received in full"),
        (None, "api", "approve", "Refund matches the invoice"),
    ], rows
    people = ["user:ana@example.com", "user:ana@example.com", "user:bo@example.com"]
    assert [r[0] for r in rows] == people, rows
