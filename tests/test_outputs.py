"""Outputs as a set, checked before computing; workers that die with their parent (issue 17,
causes 14-17)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from click.testing import CliRunner

from simulator.cli import commands as cli
from simulator.cli.outputs import OutputSet, check_out_dir, write_atomic
from simulator.specs.checks import SpecError


def _one_error_line(args):
    r = CliRunner().invoke(cli.main, args)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, r.output
    return lines[0]


@pytest.fixture
def no_simulation(monkeypatch):
    """Any simulation started is a failure: the --out check must come first."""
    from simulator import scenario

    def boom(*a, **k):
        raise AssertionError("simulated before checking --out")

    monkeypatch.setattr(scenario.Scenario, "run", boom)


@pytest.mark.parametrize("cmd", [["simulate", "-n", "5"], ["sweep", "-n", "5", "--rates", "1,2"],
                                 ["plan", "-n", "5", "-r", "1"], ["whatif", "hardware", "-H", "a100-80gb", "-n", "5"]])
def test_out_under_a_file_fails_before_any_work(tmp_path, no_simulation, cmd):
    f = tmp_path / "file"
    f.write_text("x")
    t0 = time.monotonic()
    line = _one_error_line([*cmd, "--out", str(f / "sub")])
    assert "is a file" in line
    assert time.monotonic() - t0 < 5  # in practice well under a second


def test_out_empty_and_dangling_link(tmp_path, no_simulation):
    assert "empty" in _one_error_line(["simulate", "-n", "5", "--out", ""])
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    assert "dangling" in _one_error_line(["simulate", "-n", "5", "--out", str(link)])
    assert "dangling" in _one_error_line(["roofline", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--out", str(link)])


def test_calibrate_out_checked_first(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    line = _one_error_line(["calibrate", str(tmp_path / "missing.csv"), "-H", "h100-sxm", "--out", str(f / "o.yaml")])
    assert "is a file" in line  # not "missing.csv: no such file": the output is checked first


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_out_in_read_only_folder(tmp_path, no_simulation):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert "cannot write" in _one_error_line(["simulate", "-n", "5", "--out", str(ro / "x")])
    finally:
        ro.chmod(0o755)


def test_output_set_is_all_old_or_all_new(tmp_path):
    d = tmp_path / "out"
    with OutputSet(d) as s:
        (s / "a.csv").write_text("old a")
        (s / "b.json").write_text("old b")
    (d / "keep.txt").write_text("kept")
    with pytest.raises(RuntimeError), OutputSet(d) as s:
        (s / "a.csv").write_text("new a")
        raise RuntimeError("killed after the first new file")
    assert (d / "a.csv").read_text() == "old a" and (d / "b.json").read_text() == "old b"
    with OutputSet(d) as s:
        (s / "a.csv").write_text("new a")
        (s / "b.json").write_text("new b")
    assert sorted(p.name for p in d.iterdir()) == ["a.csv", "b.json", "keep.txt"]
    assert (d / "b.json").read_text() == "new b" and (d / "keep.txt").read_text() == "kept"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging or old folder left


def test_output_set_through_a_symlinked_folder(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    with OutputSet(link) as s:
        (s / "a.csv").write_text("x")
    assert link.is_symlink() and (real / "a.csv").read_text() == "x"


def test_write_atomic_through_symlink_long_name_and_failure(tmp_path, monkeypatch):
    target = tmp_path / "t.txt"
    target.write_text("old")
    link = tmp_path / "l.txt"
    link.symlink_to(target)
    write_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    long = tmp_path / ("x" * 250 + ".png")  # 254 bytes: the temporary name must not grow it
    write_atomic(long, b"png")
    assert long.read_bytes() == b"png"

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError):
        write_atomic(tmp_path / "f.txt", "data")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([target.name, link.name, long.name])


def test_check_out_dir_accepts_new_and_existing(tmp_path):
    assert check_out_dir(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert check_out_dir(tmp_path) == tmp_path
    with pytest.raises(SpecError, match="not a folder"):
        f = tmp_path / "f"
        f.write_text("")
        check_out_dir(f)


def test_failed_sweep_without_out_leaves_no_temp_folder(tmp_path, monkeypatch):
    import tempfile

    from simulator.analysis import sweep as sw

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def fail(*a, **k):
        raise SpecError("a point failed")

    monkeypatch.setattr(sw, "sweep", fail)
    _one_error_line(["sweep", "-n", "5", "--rates", "1,2", "--serial", "-q"])
    assert list(tmp_path.iterdir()) == []


_POOL_CHILD = textwrap.dedent("""
    import sys, time
    from simulator.analysis.executors import PoolExecutor
    ex = PoolExecutor(2)
    ex.map(time.sleep, [(0.01,), (0.01,)])  # starts the workers
    print(*[p.pid for p in ex._pool._processes.values()], flush=True)
    ex.map(time.sleep, [(30,), (30,)])
""")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux process checks")
def test_pool_workers_die_with_a_killed_parent():
    """kill -9 of the parent: no cleanup runs in it, yet its pool workers (and the resource
    tracker) end within seconds."""
    p = subprocess.Popen([sys.executable, "-c", _POOL_CHILD], stdout=subprocess.PIPE, text=True)
    workers = []
    try:
        workers = [int(x) for x in p.stdout.readline().split()]
        assert len(workers) == 2
        # every child of the parent: the workers and multiprocessing's resource tracker
        ps = subprocess.run(["ps", "-o", "pid=", "--ppid", str(p.pid)], capture_output=True, text=True)
        workers = sorted(set(workers) | {int(x) for x in ps.stdout.split()})
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        deadline = time.monotonic() + 10
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(w) for w in workers)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
        for w in workers:
            if _alive(w):
                os.kill(w, signal.SIGKILL)


# ------------------------------------------------------------------ resume (cause 3)

def _kept_sweep(tmp_path, monkeypatch, extra=()):
    from tests.test_reliability import _SWEEP_ARGS, _interrupting

    calls = _interrupting(monkeypatch, after=2)
    d = tmp_path / "kept"
    r = CliRunner().invoke(cli.main, [*_SWEEP_ARGS, *extra, "--out", str(d)])
    assert r.exit_code == 130, r.output
    calls.update(n=0, after=None)
    return d, [*_SWEEP_ARGS, *extra, "--resume", str(d)]


def test_resume_refuses_an_edited_hardware_file(tmp_path, monkeypatch):
    hw = tmp_path / "hw.yaml"
    hw.write_text("base: h100-sxm\nid: my-gpu\nhbm_bandwidth_bytes_per_s: 3.0e12\n")
    d, resume = _kept_sweep(tmp_path, monkeypatch, ["-H", str(hw)])
    hw.write_text("base: h100-sxm\nid: my-gpu\nhbm_bandwidth_bytes_per_s: 1.5e12\n")
    line = _one_error_line(resume)
    assert "different inputs" in line and "hw.yaml" in line


@pytest.mark.parametrize("edit", ['"completed":-5', '"completed":NaN'])
def test_resume_refuses_hand_edited_points(tmp_path, monkeypatch, edit):
    import re

    d, resume = _kept_sweep(tmp_path, monkeypatch)
    f = d / "points.jsonl"
    lines = f.read_text().splitlines()
    assert len(lines) == 3  # header + 2 points
    lines[1] = re.sub(r'"completed":\d+', edit, lines[1])
    f.write_text("\n".join(lines) + "\n")
    assert "corrupt" in _one_error_line(resume)


def test_full_disk_mid_write_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    """A write failing after the run (ENOSPC): one line, no staging folder or temp file left,
    an earlier output set untouched."""
    d = tmp_path / "out"
    args = ["simulate", "-w", "random", "-n", "5", "--input-len", "16", "--output-len", "2", "-q", "--out", str(d)]
    assert CliRunner().invoke(cli.main, args).exit_code == 0
    before = {p.name: p.read_bytes() for p in d.iterdir()}

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    assert "No space left" in _one_error_line([*args[:-2], "-n", "6", "--out", str(d)])
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_roofline_out_with_a_254_byte_name(tmp_path):
    out = tmp_path / ("r" * 250 + ".svg")
    r = CliRunner().invoke(cli.main, ["roofline", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 0


@pytest.mark.parametrize("signal_exc,code,word", [("terminated", 143, "terminated"), ("interrupt", 130, "interrupted")])
def test_a_signal_wrapped_by_an_import_still_exits_as_the_signal(signal_exc, code, word) -> None:
    """SIGTERM that lands while matplotlib defines a class reaches the command as RuntimeError
    ("Error calling __set_name__ ...") with the signal as its cause: seen in CI as exit 1 and a
    traceback from `sweep` writing its plots. It must exit as the signal does, in one line."""
    import click

    from simulator.cli.group import CliGroup, Terminated

    @click.group(cls=CliGroup)
    def grp() -> None:
        pass

    @grp.command()
    def boom() -> None:
        err = Terminated() if signal_exc == "terminated" else KeyboardInterrupt()
        try:
            raise err
        except KeyboardInterrupt as k:
            raise RuntimeError("Error calling __set_name__ on 'x' instance 'converter' in 'Axis'") from k

    @grp.command()
    def plain() -> None:
        raise RuntimeError("a bug, not a signal")

    @grp.command()
    def disk() -> None:  # a cleanup's write fails while unwinding from the signal
        err = Terminated() if signal_exc == "terminated" else KeyboardInterrupt()
        try:
            raise err
        except KeyboardInterrupt:
            raise OSError(28, "No space left on device", "out/summary.json") from None

    res = CliRunner().invoke(grp, ["boom"])
    assert res.exit_code == code and res.output.strip().splitlines()[-1] == word
    res = CliRunner().invoke(grp, ["disk"])  # the signal wins over the error it caused
    assert res.exit_code == code and res.output.strip().splitlines()[-1] == word
    res = CliRunner().invoke(grp, ["plain"])  # other exceptions are not swallowed
    assert res.exit_code == 1 and isinstance(res.exception, RuntimeError)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux process checks")
def test_a_sigterm_swallowed_by_a_finaliser_is_sent_again() -> None:
    """A SIGTERM whose handler runs inside a finaliser is printed as "Exception ignored" and
    dropped by Python; the CLI sends it again, so the command still ends with exit 143 and
    one line, not as if never signalled."""
    import gc

    import click

    from simulator.cli.group import CliGroup, Terminated

    class Finaliser:
        def __del__(self) -> None:
            raise Terminated()  # what the handler does when the signal lands in a finaliser

    group = CliGroup()
    reached: list[str] = []

    @group.command()
    def work() -> None:
        Finaliser()  # collected at once: its Terminated is swallowed
        gc.collect()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # the re-sent signal lands here
            time.sleep(0.01)
        reached.append("end")  # never reached
        click.echo("done")

    res = CliRunner().invoke(group, ["work"])
    assert res.exit_code == 143 and reached == [], res.output
    assert "terminated" in res.output and "done" not in res.output


def test_sigterm_of_a_pooled_sweep_stops_its_workers(tmp_path):
    """kill -TERM: the sweep unwinds (exit 143), its pool workers end, no staging folder left."""
    import shutil

    exe = shutil.which("llmsim")
    if exe is None:
        pytest.skip("llmsim not installed as a command")
    # 20,000 requests a point: the kill lands while the pool simulates (with 3,000 the sweep ends
    # about 2 s in, so the kill could land in the plots' imports instead, as in a CI failure)
    p = subprocess.Popen([exe, "sweep", "-w", "random", "-n", "20000", "--rates", "1,2,3,4,5,6", "--workers", "2",
                          "-q", "--out", str(tmp_path / "o")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(workers) < 2 and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.2)
            out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(p.pid)], capture_output=True, text=True).stdout
            workers = [int(x) for x in out.split()]
        if len(workers) < 2:
            pytest.skip("the pool did not start in time")
        time.sleep(1.0)
        os.kill(p.pid, signal.SIGTERM)
        assert p.wait(30) == 143, p.stderr.read()
        deadline = time.monotonic() + 10
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(w) for w in workers)
        assert not [q for q in tmp_path.iterdir() if q.name.startswith(".llmsim")]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
        for w in workers:
            if _alive(w):
                os.kill(w, signal.SIGKILL)
