"""dpkit's worked examples and the ladder paper's reproduction: what ``dpkit demo`` and
``dpkit ladder reproduce`` run.

They print with rich, plot with matplotlib and analyse tables with the analytics extra, so this
package needs the ``cli`` extra (``pip install 'dpkit[cli]'``, which brings analytics and ml);
imported without it, it is refused with a :class:`~dpkit._extras.MissingExtraError` naming the
extra. The library never imports it (tests/unit/test_architecture.py): the demos sit on top of
dpkit, beside the CLI. One module per area:

* :mod:`dpkit.demos.mechanisms` – the seed material's examples: a randomized-response survey,
  three queries under one budget, Laplace against the staircase;
* :mod:`dpkit.demos.analytics` – a synthetic payroll analysed through a Session and a ledger;
* :mod:`dpkit.demos.ml` – the seed's sum, mean and cluster centres under ε = 1;
* :mod:`dpkit.demos.local` – an emoji-frequency collection in the local model;
* :mod:`dpkit.demos.synth` – synthetic data (MST) from a small survey table;
* :mod:`dpkit.demos.ladder` – the experiments of Wu, He & Xia (2017), Section 6.

:func:`run_demo` runs all but the ladder in turn (``dpkit demo``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpkit._extras import require

require("cli", by="dpkit.demos")

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["run_demo"]


def run_demo(console: Console | None = None) -> None:
    """Print the worked examples (``dpkit demo``)."""
    from rich.console import Console

    from dpkit.demos.analytics import payroll_demo
    from dpkit.demos.local import run_local_demo
    from dpkit.demos.mechanisms import run_seed_examples
    from dpkit.demos.ml import run_ml_demo
    from dpkit.demos.synth import run_synth_demo

    console = console or Console()
    console.print("[bold]dpkit demo[/bold] — the seed material's worked examples\n")
    run_seed_examples(console)
    payroll_demo(console)
    # the seed's third query done right: cluster centres from a public candidate grid, ε = 0.2
    # of a total of 1 (issue 13), and the local model: an emoji collection (issue 12)
    run_ml_demo(console)
    run_local_demo(console)
    run_synth_demo(console)
