"""Synthetic data: private tables that keep the low-order statistics (issue 24).

``fit(data, domain, epsilon=..., delta=...)`` measures marginals with dpkit's exact noise, as
one ledger release, and fits a graphical model to them (MST: McKenna, Miklau & Sheldon 2021);
``.sample(n)`` draws records from it (post-processing). See docs/synth.md.
"""

from __future__ import annotations

from dpkit._extras import require

require("analytics", by="dpkit.synth")

from dpkit.synth._domain import Domain  # noqa: E402
from dpkit.synth._fit import Synthesizer, fit  # noqa: E402

__all__ = ["Domain", "Synthesizer", "fit"]
