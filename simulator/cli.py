"""The `llmsim` command line. The only module that prints or writes files.

Every user mistake (bad spec, bad option, bad file) is caught here and printed as one
`error: ...` line on stderr with exit status 2; never a traceback.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from .specs import SpecError


class _Group(click.Group):
    """Click group that turns SpecError (and bad files) into one line and exit 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SpecError as e:
            click.echo(f"error: {e}", err=True)
            ctx.exit(2)
        except click.exceptions.Exit:
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="llmsim")
def main() -> None:
    """llmsim: predict LLM serving latency, throughput and capacity before buying GPUs."""


def echo_json(obj: Any) -> None:
    """Print one JSON object (NaN/inf written as null)."""
    click.echo(json.dumps(_clean(obj), indent=2))


def _clean(obj: Any) -> Any:
    import math

    import numpy as np

    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


# ---- commands are registered below, one section per command -----------------------------

# [catalog commands: models, hardware, show]

# [predict, roofline]

# [simulate]

# [sweep]

# [validate, calibrate]

# [plan, whatif]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
