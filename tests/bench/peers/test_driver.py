"""The peers benchmark's driver (bench/peers/driver.py), run with no server answering:
each system is skipped and said, and the run still prints and writes its summary, then
exits 1."""

import json
import subprocess
import sys

from tests.processes import PROJECT_ROOT, environment


def test_each_system_unreachable_is_skipped_and_only_atp_is_measured_again(tmp_path):
    output = tmp_path / "peers.json"
    closed = {"ATP_PEERS_POSTGRES_URL": "postgres://postgres@127.0.0.1:1",
              "ATP_PEERS_REDIS_URL": "redis://127.0.0.1:1"}
    result = subprocess.run(
        [sys.executable, "-m", "bench.peers", "--peers", "pgqueuer,huey",
         "--atp-python", sys.executable, "--peers-python", sys.executable,
         "--json", str(output)],
        cwd=PROJECT_ROOT, env=environment(**closed), capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr  # a system not measured fails the run
    lines = result.stdout.splitlines()
    said = {line: lines[number + 1] for number, line in enumerate(lines) if line.startswith("== ")}
    assert list(said) == ["== atp", "== pgqueuer", "== huey", "== atp (again)"]
    assert said["== huey"] == "  skipped: redis://127.0.0.1:1 does not answer"
    assert {said[name] for name in ("== atp", "== pgqueuer", "== atp (again)")} == {
        "  skipped: postgres://postgres@127.0.0.1:1 does not answer"}
    summary = json.loads(output.read_text())
    assert [(s["system"], s.get("again", False)) for s in summary["systems"]] == [
        ("atp", False), ("pgqueuer", False), ("huey", False), ("atp", True)]
