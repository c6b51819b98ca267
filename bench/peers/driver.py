"""atp beside its peers, one system after another on this machine (``make bench-peers``).

    python -m bench.peers [--peers pgqueuer,celery] [--tasks 5000] [--repeat 3]
                          [--samples 200] [--bulk 20000] [--stream-seconds 60]
                          [--celery-broker redis|amqp] [--no-atp-again]
                          [--json .bench/peers.json]
                          --atp-python .venv/bin/python --peers-python .venv-peers/bin/python

atp runs first, from the project's venv; then each peer (all of them unless
``--peers`` names some), from the peers' venv; then atp again (``--no-atp-again``: not),
to show how far the machine's speed drifted meanwhile. Each system is measured by
``bench.peers.measure`` in a process of its own, in a PostgreSQL database of its own
(``atp_peers_<system>``, dropped and created anew) or, for Huey and Celery, a Redis
database number of its own (flushed). The driver itself needs nothing but Python.

It prints each system's lines as they come, then the machine line (``bench.daemon``'s
machine reference, taken in atp's process), the table of figures with each peer's ratio
to atp's, and how each system was set up; it writes everything as JSON to ``--json``.
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from bench.peers import base
from bench.peers.report import render_notes, render_table

#: How long one system's measurements may take before they are given up.
SYSTEM_TIMEOUT_SECONDS = 30 * 60


def answers(url, default_port):
    """Return whether the server of ``url`` accepts a TCP connection."""
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname, parts.port or default_port), timeout=5).close()
    except OSError:
        return False
    return True


def unreachable(system, options):
    """Return why ``system``'s server does not answer, or None when it does."""
    if system == "celery" and options.celery_broker == "amqp":
        url, port = os.environ.get(base.AMQP_ENV, base.AMQP_DEFAULT), 5672
    elif system in base.BROKERED:
        url, port = os.environ.get(base.REDIS_ENV, base.REDIS_DEFAULT), 6379
    else:
        url, port = os.environ.get(base.POSTGRES_ENV, base.POSTGRES_DEFAULT), 5432
    return None if answers(url, port) else f"{url} does not answer"


def run_system(system, options):
    """Measure ``system`` in a process of its own; return its result."""
    python = options.atp_python if base.SYSTEMS[system][1] == "project" else options.peers_python
    with tempfile.NamedTemporaryFile(suffix=".json") as output:
        command = [python, "-m", "bench.peers.measure", system, "--tasks", str(options.tasks),
                   "--repeat", str(options.repeat), "--samples", str(options.samples),
                   "--bulk", str(options.bulk), "--stream-seconds",
                   str(options.stream_seconds), "--json", output.name]
        environment = {**os.environ, base.CELERY_BROKER_ENV: options.celery_broker}
        began = time.monotonic()
        try:
            process = subprocess.run(command, cwd=base.PROJECT_ROOT, env=environment,
                                     timeout=SYSTEM_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            return {"system": system, "error": f"not done in {SYSTEM_TIMEOUT_SECONDS} s"}
        text = Path(output.name).read_text()
    if not text:
        return {"system": system, "error": f"its measurement exited with {process.returncode}"}
    result = json.loads(text)
    result["seconds"] = time.monotonic() - began
    return result


def main():
    from bench.daemon import machine_line

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    peers = [system for system in base.SYSTEMS if system != "atp"]
    parser.add_argument("--peers", default=",".join(peers),
                        help=f"the peers to measure beside atp (default: {','.join(peers)})")
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--bulk", type=int, default=20000)
    parser.add_argument("--stream-seconds", type=int, default=60)
    parser.add_argument("--celery-broker", choices=["redis", "amqp"], default="redis")
    parser.add_argument("--atp-again", action=argparse.BooleanOptionalAction, default=True,
                        help="measure atp once more after the peers (default: yes)")
    parser.add_argument("--atp-python", default=sys.executable)
    parser.add_argument("--peers-python", default=sys.executable)
    parser.add_argument("--json", type=Path, default=base.PROJECT_ROOT / ".bench" / "peers.json")
    options = parser.parse_args()
    chosen = [name.strip() for name in options.peers.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(peers))
    if unknown:
        parser.error(f"unknown peer(s) {', '.join(unknown)}; known: {', '.join(peers)}")
    began = time.monotonic()
    results = []
    order = ["atp", *[peer for peer in peers if peer in chosen]]
    if options.atp_again and len(order) > 1:
        # The machine's speed drifts over a run (other work on it, its host's): atp once
        # more at the end says by how much, beside ratios taken to its first run.
        order.append("atp")
    for number, system in enumerate(order):
        again = number > 0 and system == "atp"
        print(f"== {system}" + (" (again)" if again else ""), flush=True)
        reason = unreachable(system, options)
        result = ({"system": system, "error": f"skipped: {reason}"} if reason
                  else run_system(system, options))
        if again:
            result["again"] = True
        if "error" in result:
            print(f"  {result['error']}", flush=True)
        results.append(result)
    seconds = time.monotonic() - began
    reference = results[0].get("machine_reference")
    summary = {
        "date": datetime.date.today().isoformat(),
        "command": shlex.join(["python", "-m", "bench.peers", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "reference": reference},
        "options": {key: value for key, value in vars(options).items()
                    if key not in ("json", "atp_python", "peers_python")},
        "seconds": seconds, "systems": results,
    }
    print(f"\n{summary['date']}, {os.cpu_count()} CPUs, {platform.platform()}; "
          f"{seconds / 60:.1f} minutes")
    if reference:
        print(machine_line(reference))
    if results[-1].get("again") and results[-1].get("machine_reference"):
        print("at the end, " + machine_line(results[-1]["machine_reference"]))
    print(f"{options.tasks:,} tasks a drain (median of {options.repeat}), {options.samples} "
          f"single tasks on an idle worker, {options.bulk:,} bulk-enqueued, a "
          f"{options.stream_seconds} s stream; ratios are the peer's figure over atp's\n")
    print("\n".join(render_table(results)))
    print()
    print("\n".join(render_notes(results)))
    options.json.parent.mkdir(parents=True, exist_ok=True)
    options.json.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\nwritten to {options.json}")
    return 1 if any("error" in result for result in results) else 0
