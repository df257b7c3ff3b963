"""How soon ``dpkit serve`` answers after start: ``/api/v1/health`` and a first authenticated
request (``/api/v1/me``), beside the service's app started directly by uvicorn (what ``dpkit
serve`` ran before its front app, dpkit.service._boot), from the same run.

    python benchmarks/serve_start.py --runs 5
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

TOKEN = "officer-token-for-the-benchmark-0123456789"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def measure(direct: bool) -> tuple[float, float]:
    """(seconds to a /health answer, seconds to a /me answer) from process start."""
    root = Path(tempfile.mkdtemp())
    port = _port()
    env = dict(os.environ, DPKIT_BOOTSTRAP_TOKEN=TOKEN)
    database = f"sqlite:///{root / 'service.db'}"
    if direct:
        env.update(DPKIT_DATABASE=database, DPKIT_DATA_ROOT=str(root))
        command = [sys.executable, "-m", "uvicorn", "--factory", "dpkit.service._app:build_app"]
        command += ["--port", str(port), "--log-level", "warning"]
    else:
        command = [sys.executable, "-m", "dpkit", "serve", "--database", database]
        command += ["--port", str(port)]
    url = f"http://127.0.0.1:{port}/api/v1"
    start = time.monotonic()
    process = _start(command, env, root)
    try:
        health = None
        while health is None and time.monotonic() - start < 120:
            try:
                httpx.get(f"{url}/health", timeout=1)
                health = time.monotonic() - start
            except httpx.HTTPError:
                time.sleep(0.02)
        me = httpx.get(f"{url}/me", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120)
        me.raise_for_status()
        return health or float("nan"), time.monotonic() - start
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(30)
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rows = {"dpkit serve": [], "uvicorn build_app (before)": []}  # type: dict[str, list[tuple[float, float]]]
    for _ in range(args.runs):
        rows["dpkit serve"].append(measure(direct=False))
        rows["uvicorn build_app (before)"].append(measure(direct=True))
    load = os.getloadavg()[0]
    print(f"median of {args.runs} runs, load average {load:.1f}")
    print(f"{'':28} {'/health s':>10} {'/me s':>8}")
    for name, values in rows.items():
        health = statistics.median(v[0] for v in values)
        me = statistics.median(v[1] for v in values)
        print(f"{name:28} {health:10.2f} {me:8.2f}")


if __name__ == "__main__":
    main()
