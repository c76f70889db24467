"""Headless Chromium for tests, driven over the DevTools protocol on a pipe (no extra package).

`load(path)` opens a local page in a fresh Chromium (a new, empty --user-data-dir; flags from
the machine's notes: no GPU, no sandbox as root, no background networking), waits for its load
event, and returns what a person would notice: console errors and uncaught exceptions, every
request the page made, the numbers it shows (`[data-key]` elements), whether its images
decoded, and a full-page screenshot. Debian's `chromium` package provides the browser
(`.ci/run` installs it); `binary()` says why not when it is missing.

The protocol: `--remote-debugging-pipe` reads JSON commands ending in NUL from fd 3 and writes
replies and events to fd 4 (what Puppeteer's pipe transport does).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
         "--remote-debugging-pipe"]


def binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageReport:
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, failed loads
    warnings: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    numbers: list[tuple[str, str, str]] = field(default_factory=list)  # (data-key, data-value, text)
    images_ok: bool = False
    title: str = ""
    screenshot: bytes = b""


class _Pipe:
    def __init__(self, proc: subprocess.Popen, write_fd: int, read_fd: int) -> None:
        self.proc, self.wfd, self.rfd = proc, write_fd, read_fd
        self.buf = b""
        self.next_id = 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 60.0) -> dict:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.wfd, json.dumps(msg).encode() + b"\0")
        want = self.next_id
        deadline = time.monotonic() + timeout
        while True:
            m = self._read(deadline)
            if m.get("id") == want:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method: str, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        for i, m in enumerate(self.events):
            if m.get("method") == method:
                return self.events.pop(i)
        while True:
            m = self._read(deadline)
            if m.get("method") == method:
                return m
            self.events.append(m)

    def drain(self, seconds: float) -> None:
        """Read whatever arrives for `seconds` (late console messages)."""
        deadline = time.monotonic() + seconds
        try:
            while True:
                self.events.append(self._read(deadline))
        except TimeoutError:
            pass

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply from chromium")
            ready, _, _ = select.select([self.rfd], [], [], left)
            if ready:
                chunk = os.read(self.rfd, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"chromium closed its pipe (exit {self.proc.poll()})")
                self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        return json.loads(raw)


def _collect(events: list[dict], rep: PageReport) -> None:
    for m in events:
        method, p = m.get("method"), m.get("params", {})
        if method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            rep.errors.append("exception: " + str(d.get("exception", {}).get("description") or d.get("text")))
        elif method == "Runtime.consoleAPICalled":
            line = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            (rep.errors if p.get("type") in ("error", "assert") else rep.warnings).append(f"console.{p.get('type')}: {line}")
        elif method == "Log.entryAdded":
            e = p.get("entry", {})
            (rep.errors if e.get("level") == "error" else rep.warnings).append(f"log {e.get('level')}: {e.get('text')} {e.get('url', '')}")
        elif method == "Network.requestWillBeSent":
            rep.requests.append(p.get("request", {}).get("url", ""))
        elif method == "Network.loadingFailed":
            rep.errors.append(f"load failed: {p.get('errorText')}")


NUMBERS_JS = ("JSON.stringify(Array.from(document.querySelectorAll('[data-key]'))"
              ".map(e => [e.dataset.key, e.dataset.value, e.textContent]))")
IMAGES_JS = "Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)"


def load(path: Path, width: int = 1280, settle_s: float = 0.5) -> PageReport:
    """Open `path` headless and report on it (module docstring); the browser is always closed."""
    exe = binary()
    if exe is None:
        raise RuntimeError("no chromium on PATH")
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()

    profile = tempfile.mkdtemp(prefix="llmsim-chromium-")
    # bash puts the pipe ends on fds 3 and 4 and execs chromium (a preexec_fn would do it too,
    # but is not safe in a process with threads); it reads copies at fds >= 10, since a pipe end
    # may itself be fd 3 or 4 (and dash takes no fd above 9)
    r = fcntl.fcntl(to_child_r, fcntl.F_DUPFD_CLOEXEC, 10)
    w = fcntl.fcntl(from_child_w, fcntl.F_DUPFD_CLOEXEC, 10)
    shell = f'exec "$0" "$@" 3<&{r} 4>&{w} {r}<&- {w}>&-'
    cmd = [shutil.which("bash") or "/bin/bash", "-c", shell, exe, *FLAGS, f"--user-data-dir={profile}", "about:blank"]
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, pass_fds=(r, w))
    finally:
        for fd in (r, w, to_child_r, from_child_w):
            os.close(fd)
    pipe = _Pipe(proc, to_child_w, from_child_r)
    rep = PageReport()
    try:
        target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        sid = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page", "Network"):
            pipe.send(f"{domain}.enable", session=sid)
        pipe.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session=sid)
        pipe.send("Page.navigate", {"url": path.resolve().as_uri()}, session=sid)
        pipe.wait_event("Page.loadEventFired")
        pipe.drain(settle_s)
        rep.numbers = [tuple(x) for x in json.loads(_eval(pipe, sid, NUMBERS_JS))]  # type: ignore[misc]
        rep.images_ok = bool(_eval(pipe, sid, IMAGES_JS))
        rep.title = str(_eval(pipe, sid, "document.title"))
        size = pipe.send("Page.getLayoutMetrics", session=sid)["cssContentSize"]
        shot = pipe.send("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": min(size["height"], 16000), "scale": 1}},
            session=sid)
        rep.screenshot = base64.b64decode(shot["data"])
        pipe.drain(0.1)
        _collect(pipe.events, rep)
        try:
            pipe.send("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError):
            pass
    finally:
        os.close(to_child_w)
        os.close(from_child_r)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)
        shutil.rmtree(profile, ignore_errors=True)
    return rep


def _eval(pipe: _Pipe, sid: str, expr: str) -> Any:
    r = pipe.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session=sid)
    if "exceptionDetails" in r:
        raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
    return r["result"].get("value")
