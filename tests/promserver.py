"""A real Prometheus for tests: backfill an OpenMetrics file with promtool, serve the TSDB on
127.0.0.1, query it over the HTTP API, stop it. Debian's `prometheus` package provides both
binaries (`.ci/run` installs it); `binaries()` says why not when they are missing."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any


def binaries() -> tuple[str, str] | str:
    """(prometheus, promtool) paths, or the reason they cannot be used."""
    prom, tool = shutil.which("prometheus"), shutil.which("promtool")
    if prom and tool:
        return prom, tool
    return ("Debian's prometheus package is not installed (no prometheus/promtool on PATH); "
            ".ci/run installs it with apt-get install prometheus")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def backfill(promtool: str, openmetrics: Path, tsdb: Path) -> str:
    """`promtool tsdb create-blocks-from openmetrics FILE DIR`; returns its output."""
    r = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(tsdb)],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"promtool backfill failed ({r.returncode}): {r.stderr or r.stdout}")
    return r.stdout


class Prometheus:
    """One Prometheus server over `tsdb`, on 127.0.0.1 (nothing scraped: an empty config)."""

    def __init__(self, binary: str, tsdb: Path, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = workdir / "prometheus.yml"
        cfg.write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
        self.log = (workdir / "prometheus.log").open("w")
        self.proc: subprocess.Popen | None = subprocess.Popen(
            [binary, f"--config.file={cfg}", f"--storage.tsdb.path={tsdb}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=3650d"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=workdir)
        self._wait_ready(workdir)

    def _wait_ready(self, workdir: Path, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError("prometheus exited: " + (workdir / "prometheus.log").read_text()[-2000:])
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.stop()
        raise AssertionError("prometheus not ready after 60 s")

    def api(self, path: str, **params: Any) -> Any:
        q = urllib.parse.urlencode({k: str(v) for k, v in params.items()})
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{q}", timeout=30) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str, t: float) -> list[dict]:
        return self.api("query", query=expr, time=f"{t:.3f}")["result"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        return self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}",
                        step=f"{step:g}")["result"]

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)
            self.proc = None
        self.log.close()
