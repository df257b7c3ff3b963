"""dpkit.sensitivity: data-dependent sensitivity.

* :mod:`~dpkit.sensitivity.local` – local sensitivity LS_f(x), distance-k sensitivity A^(k)(x)
  and β-smooth sensitivity S*, exactly where stated (NRS 2007);
* :mod:`~dpkit.sensitivity.smooth` – releases calibrated to smooth sensitivity with admissible
  noise sampled exactly on a grid;

See docs/sensitivity.md for which method to use when, and the proofs.
"""

from dpkit.sensitivity.local import (
    distance_k_sensitivity,
    local_sensitivity,
    smooth_sensitivity,
)

__all__ = [
    "distance_k_sensitivity",
    "local_sensitivity",
    "smooth_sensitivity",
]
