"""The `llmsim` Click group: every user mistake as one `error: ...` line, signals as unwinding.

A `SpecError` (bad spec, option or file) and an `OSError` from an output write become one line
on stderr and exit status 2, never a traceback; Ctrl-C exits 130 and SIGTERM 143, both raised as
`KeyboardInterrupt` in the main thread so every `with`/`finally` cleanup runs (process pools are
stopped, staged output folders removed).
"""

from __future__ import annotations

from typing import Any

import click

from simulator.cli import options as opt
from simulator.specs.checks import SpecError


class CliGroup(click.Group):
    """Click group that turns SpecError (and bad files) into one line and exit 2, and accepts
    vLLM's space-separated `--goodput ttft:500 tpot:50` (`options.expand_nargs`). Its commands
    add the named workloads' flags when first parsed (`options.LazyOptionsCommand`)."""

    command_class = opt.LazyOptionsCommand
    group_class = opt.LazyOptionsGroup

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, opt.expand_nargs(list(args)))

    def invoke(self, ctx: click.Context) -> Any:
        import signal
        import sys
        import threading

        # SIGTERM unwinds like Ctrl-C: pools are stopped and staged outputs removed
        main_thread = threading.current_thread() is threading.main_thread()
        old = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
        old_hook = sys.unraisablehook
        if main_thread:
            sys.unraisablehook = _resignal_unraisable(old_hook)
        try:
            return super().invoke(ctx)
        except OSError as e:  # e.g. an output that became unwritable mid-run (full disk)
            _exit_if_interrupted(ctx, e)  # raised while unwinding from a signal: the signal wins
            where = f"{e.filename}: " if getattr(e, "filename", None) else ""
            click.echo(f"error: {where}{e.strerror or e}".replace("\n", " "), err=True)
            ctx.exit(2)
        except SpecError as e:
            _exit_if_interrupted(ctx, e)
            click.echo(f"error: {e}", err=True)
            ctx.exit(2)
        except click.exceptions.Exit:
            raise
        except KeyboardInterrupt as e:
            _exit_if_interrupted(ctx, e)
        except MemoryError as e:
            _exit_if_interrupted(ctx, e)
            click.echo("error: out of memory: reduce --num-requests, --replicas or the sweep size", err=True)
            ctx.exit(2)
        except Exception as e:
            # a signal that lands inside an import can come back wrapped: Python re-raises an
            # exception from a descriptor's __set_name__ as RuntimeError (matplotlib's Axis
            # during a sweep's plots), so SIGTERM gave a traceback and exit 1
            _exit_if_interrupted(ctx, e)
            raise
        finally:
            if main_thread:
                signal.signal(signal.SIGTERM, old)
                sys.unraisablehook = old_hook


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that every `with`/`finally` cleanup runs."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


def _resignal_unraisable(previous: Any) -> Any:
    """A `sys.unraisablehook` that sends a swallowed signal again. A signal whose handler runs
    while Python executes a finaliser (`__del__`, a weakref callback, garbage collection during a
    plot's imports) raises there, and Python prints "Exception ignored" and carries on: the run
    would finish as if never signalled (exit 0 to a `kill -TERM`). Sending it again lets the
    handler raise at the next ordinary bytecode; from a short-lived thread, 10 ms on, because a
    signal sent from inside the hook would be handled inside it, and swallowed again."""
    import os
    import signal
    import threading

    def hook(unraisable: Any) -> None:
        exc = unraisable.exc_value
        if isinstance(exc, KeyboardInterrupt):
            again = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
            timer = threading.Timer(0.01, os.kill, (os.getpid(), again))
            timer.daemon = True
            timer.start()
        else:
            previous(unraisable)

    return hook


def _exit_if_interrupted(ctx: click.Context, e: BaseException) -> None:
    """Exit as the signal does (130 for Ctrl-C, 143 for SIGTERM, one line) when `e` was raised
    while unwinding from one (`_interrupt_in_chain`); else return."""
    k = _interrupt_in_chain(e)
    if k is not None:
        click.echo("terminated" if isinstance(k, Terminated) else "interrupted", err=True)
        ctx.exit(143 if isinstance(k, Terminated) else 130)


def _interrupt_in_chain(e: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM behind `e` (its __cause__ / __context__ chain), or None."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None
