"""Console sign-in with OpenID Connect, in Debian's Chromium against a real, certified OpenID
provider (``oidc-provider``, run from ``tests/oidc`` by the test command) and the real
``oncebox serve``: a person in a group the configuration maps signs in, sees only that tenant,
approves as ``oidc:ISSUER#SUBJECT`` (shown with their e-mail), and logs out; a person in no
mapped group, a forged, expired or wrong-audience ID token, another sign-in's nonce and a
replayed ``state`` are refused. Screenshots go to ``target/console-screenshots/``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator

import httpx
import psycopg
import pytest
from playwright.sync_api import Browser, BrowserContext
from test_console import SHOTS, Watched, browser, wait_for_status

from conftest import ROOT, Services, free_port, wait_for_port, with_refund_policy

__all__ = ["browser"]

PROVIDER = ROOT / "tests" / "oidc"
SECRET = "console-secret"


@pytest.fixture
def provider(services: Services, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, int]]:
    """The OpenID provider, and the port ``oncebox serve`` will listen on (its callback is
    registered with the provider)."""
    node = shutil.which("node")
    if node is None or not (PROVIDER / "node_modules" / "oidc-provider").is_dir():
        pytest.fail("the test provider is missing: scripts/python-tests.sh installs tests/oidc")
    port, serve_port = free_port(), free_port()
    callback = f"http://127.0.0.1:{serve_port}/console/oidc/callback"
    log = (services.tmp / "provider.log").open("wb")
    proc = subprocess.Popen(
        [node, str(PROVIDER / "provider.mjs"), str(port), callback],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port(port, proc, "oidc-provider")
        monkeypatch.setenv("ONCEBOX_OIDC_CLIENT_SECRET", SECRET)
        yield f"http://127.0.0.1:{port}", serve_port
    finally:
        proc.terminate()
        proc.wait(10)


def configure(services: Services, issuer: str, serve_port: int) -> None:
    """The services' configuration, with the provider and one group mapped to acme's ops."""
    config = with_refund_policy(services.config_file())
    with config.open("a") as f:
        f.write(
            f"""
[console.oidc]
issuer = "{issuer}"
client_id = "oncebox-console"
redirect_url = "http://127.0.0.1:{serve_port}/console/oidc/callback"
scopes = ["email", "groups"]
name = "Example ID"
[console.oidc.groups]
acme-payments = {{ tenant = "acme", role = "ops" }}
"""
        )


def sign_in(browser: Browser, base: str, login: str, shots: str | None = None) -> Watched:
    """Signs ``login`` in at the provider from the console's login page, in a new browser; the
    page is wherever the console sent the browser back to."""
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = Watched(context.new_page())
    page.page.goto(f"{base}/console/login")
    if shots:
        page.shot(f"{shots}-login")
    page.page.click("a:has-text('Sign in with Example ID')")
    page.page.wait_for_selector("input[name=login]")
    page.page.fill("input[name=login]", login)
    page.page.fill("input[name=password]", "any")
    if shots:
        # The provider's own page (its stylesheet asks for web fonts this machine cannot
        # reach): pictured, its errors not the console's.
        page.page.screenshot(path=str(SHOTS / f"{shots}-provider.png"), full_page=True)
    page.page.click("button[type=submit]")
    # The provider's consent page, the first time this browser signs in to the console.
    page.page.wait_for_selector("button[type=submit]:has-text('Continue')")
    page.page.click("button[type=submit]:has-text('Continue')")
    page.page.wait_for_url(f"{base}/console**")
    # What the provider's pages logged is theirs; from here on every error is the console's.
    page.errors.clear()
    return page


def session_cookie(context: BrowserContext) -> str | None:
    return next((c["value"] for c in context.cookies() if c["name"] == "oncebox_session"), None)


def test_a_person_signs_in_with_the_provider_approves_as_themselves_and_logs_out(
    services: Services, browser: Browser, provider: tuple[str, int]
) -> None:
    issuer, serve_port = provider
    services.receiver()
    configure(services, issuer, serve_port)
    services.worker()
    base = services.serve(port=serve_port)
    agent = services.token("acme", holder="refund-agent")
    headers = {"Authorization": f"Bearer {agent}"}
    body = {"action": "refund", "arguments": {"order_id": "o-1", "amount": "5000.00"}}
    r = httpx.post(f"{base}/v1/intents", json=body, headers={**headers, "Idempotency-Key": "r-1"})
    assert r.status_code == 202, r.text
    assert r.json()["status"] == "awaiting_approval", r.text
    other = services.token("globex")
    r = httpx.post(
        f"{base}/v1/intents",
        json={"action": "create_invoice", "arguments": {"order_id": "g-1"}},
        headers={"Authorization": f"Bearer {other}", "Idempotency-Key": "globex-1"},
    )
    assert r.status_code == 202, r.text

    # Ana, in acme-payments: signed in as her principal, shown by her e-mail, in acme only.
    seen: list[str] = []
    ana = sign_in(browser, base, "ana", shots="11-sign-in")
    ana.page.on("request", lambda rq: seen.append(rq.url))
    assert ana.page.locator("h1").inner_text() == "Overview"
    who = ana.page.locator("header .who .principal")
    assert who.inner_text() == "ana@example.com"
    assert who.get_attribute("title") == f"oidc:{issuer}#ana-0001"
    assert "acme" in ana.page.inner_text("header .who")
    ana.shot("12-signed-in")
    ana.page.goto(f"{base}/console/search?q=globex-1")
    assert "No intent of tenant acme" in ana.page.inner_text("main")

    # She approves the refund; the audit log records her principal, her e-mail beside it.
    ana.page.goto(f"{base}/console/intents/r-1")
    approve = ana.page.locator("form", has=ana.page.locator("h3", has_text="Approve"))
    approve.locator("textarea[name=reason]").fill("Checked the return")
    approve.locator("button[type=submit]").click()
    ana.page.wait_for_url("**/console/intents/r-1?done=approve")
    ana.shot("13-approved-signed-in")
    audit = subprocess.run(
        [str(services.bin), "ops", "audit", "--key", "r-1", "--json"],
        env={**os.environ, "DATABASE_URL": services.db_url},
        check=True,
        capture_output=True,
    )
    row = json.loads(audit.stdout)[0]
    assert (row["actor"], row["label"], row["via"]) == (
        f"oidc:{issuer}#ana-0001",
        "ana@example.com",
        "console",
    ), row

    # Her ops token, issued to her OpenID principal, is the same principal: it counts for nothing.
    token = services.token("acme", role="ops", holder=f"oidc:{issuer}#ana-0001")
    again = services.decide(token, "approve", "r-1")
    assert again.returncode == 3, again.stderr
    assert b"already approved" in again.stderr, again.stderr

    # Logout ends the session on the server: the old cookie opens nothing.
    old = session_cookie(ana.page.context)
    assert old is not None
    ana.page.click("button:has-text('Log out')")
    ana.page.wait_for_url(f"{base}/console/login")
    after = httpx.get(f"{base}/console", cookies={"oncebox_session": old}, follow_redirects=False)
    assert after.status_code == 303
    assert after.headers["location"].startswith("/console/login")
    ana.page.context.close()

    # Bo, in acme-payments too, approves second: released, delivered once.
    bo = sign_in(browser, base, "bo")
    bo.page.goto(f"{base}/console/intents/r-1")
    approve = bo.page.locator("form", has=bo.page.locator("h3", has_text="Approve"))
    approve.locator("textarea[name=reason]").fill("Second pair of eyes")
    approve.locator("button[type=submit]").click()
    bo.page.wait_for_url("**/console/intents/r-1?done=approve")
    # What bo submitted himself, through the API with a token issued to his OpenID principal,
    # he may not approve in the console.
    own = services.token("acme", holder=f"oidc:{issuer}#bo-0002")
    big = {"action": "refund", "arguments": {"order_id": "o-2", "amount": "7000.00"}}
    r = httpx.post(
        f"{base}/v1/intents",
        json=big,
        headers={"Authorization": f"Bearer {own}", "Idempotency-Key": "r-2"},
    )
    assert r.json()["submitted_by"] == f"oidc:{issuer}#bo-0002", r.text
    bo.page.goto(f"{base}/console/intents/r-2")
    approve = bo.page.locator("form", has=bo.page.locator("h3", has_text="Approve"))
    approve.locator("textarea[name=reason]").fill("Mine, but still")
    approve.locator("button[type=submit]").click()
    assert "someone else must approve it" in bo.page.inner_text("main")
    bo.errors = [e for e in bo.errors if "409" not in e]
    bo.page.context.close()
    wait_for_status(services.db_url, "r-1", "succeeded")
    assert services.effects("r-1") == 1


def test_sign_ins_the_console_must_refuse(
    services: Services, browser: Browser, provider: tuple[str, int]
) -> None:
    issuer, serve_port = provider
    configure(services, issuer, serve_port)
    base = services.serve(port=serve_port)

    # In no group this console maps: refused, no session.
    mal = sign_in(browser, base, "mal")
    assert "in no group this console maps" in mal.page.inner_text("main")
    mal.errors = [e for e in mal.errors if "403" not in e]
    mal.shot("14-sign-in-no-group")
    assert session_cookie(mal.page.context) is None
    mal.page.context.close()

    # Each broken ID token, armed at the provider for the next token answer: refused.
    for fault, why in (
        ("forged", "signature"),
        ("expired", "expired"),
        ("audience", "audience"),
        ("nonce", "nonce"),
    ):
        assert httpx.get(f"{issuer}/__fault/{fault}").status_code == 204
        page = sign_in(browser, base, "ana")
        text = page.page.inner_text("main")
        assert "the ID token was refused" in text, (fault, text)
        assert why in text.lower(), (fault, text)
        assert session_cookie(page.page.context) is None, fault
        page.errors = [e for e in page.errors if "403" not in e]
        page.shot(f"15-sign-in-{fault}")
        page.page.context.close()

    # A replayed state: the callback URL of a sign-in that succeeded, with its sign-in cookie
    # put back, opens nothing.
    context = browser.new_context()
    tab = context.new_page()
    callbacks: list[str] = []
    back = f"{base}/console/oidc/callback"
    tab.on("request", lambda rq: callbacks.append(rq.url) if rq.url.startswith(back) else None)
    tab.goto(f"{base}/console/login")
    tab.click("a:has-text('Sign in with Example ID')")
    tab.wait_for_selector("input[name=login]")
    started = [c for c in context.cookies() if c["name"] == "oncebox_sign_in"]
    assert len(started) == 1, context.cookies()
    tab.fill("input[name=login]", "ana")
    tab.fill("input[name=password]", "any")
    tab.click("button[type=submit]")
    tab.click("button[type=submit]:has-text('Continue')")
    tab.wait_for_url(f"{base}/console")
    assert len(callbacks) == 1, callbacks
    context.clear_cookies()
    kept = started[0]
    context.add_cookies(
        [
            {
                "name": kept["name"],
                "value": kept["value"],
                "domain": kept["domain"],
                "path": kept["path"],
            }
        ]
    )
    replay = tab.goto(callbacks[0])
    assert replay is not None
    assert replay.status == 403
    assert "already used" in tab.inner_text("main")
    assert session_cookie(context) is None
    context.close()
    # Nothing of these refusals is a session in the database.
    with psycopg.connect(services.db_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM oncebox.console_sessions WHERE principal IS NOT NULL"
        ).fetchone()
    assert row is not None
    assert row[0] == 1, "only the replay test's own sign-in"
