"""The example agent loop runs end to end: a crash and a replay of the session, one effect per
tool call at the receiver."""

from __future__ import annotations

import os
import subprocess
import sys

import oncebox
from conftest import REDACTION_KEYS, ROOT, Services


def test_the_agent_loop_example_replays_a_session_without_second_effects(
    services: Services,
) -> None:
    services.receiver()
    services.worker()
    assert services.config is not None
    env = {
        **os.environ,
        "DATABASE_URL": services.db_url,
        "ONCEBOX_CONFIG": str(services.config),
        "ONCEBOX_REDACTION_KEYS": REDACTION_KEYS,
    }
    env.pop("ONCEBOX_URL", None)
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "python" / "agent_loop.py"), "--session", "s-1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "restarting the session from step 1" in out.stdout
    assert out.stdout.count("succeeded") == 5, out.stdout  # 2 before the crash, 3 after
    assert "every step done once" in out.stdout
    for n, amount in enumerate(("120.00", "35.50", "8.25"), start=1):
        arguments = {"order_id": f"order-{n}", "amount": amount}
        key = oncebox.step_key("s-1", n, "create_invoice", arguments)
        assert services.effects(key, "tenant-42") == 1, (n, key)
