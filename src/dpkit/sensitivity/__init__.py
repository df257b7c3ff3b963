"""dpkit.sensitivity: data-dependent sensitivity.

* :mod:`~dpkit.sensitivity._local` – local sensitivity LS_f(x), distance-k sensitivity A^(k)(x)
  and β-smooth sensitivity S* (NRS 2007), exact where stated, O(n log n) for order statistics;
* :mod:`~dpkit.sensitivity._smooth` – releases calibrated to smooth sensitivity with admissible
  noise (Cauchy-type: pure ε; Laplace: (ε, δ); the Bun–Steinke zCDP families, calibrated in
  :mod:`~dpkit.sensitivity._bun_steinke`) sampled exactly on a grid; the variance on a grid,
  computed exactly (:mod:`~dpkit.sensitivity._variance`);
* :mod:`~dpkit.sensitivity._ptr` – propose-test-release (Dwork & Lei 2009);
* :mod:`~dpkit.sensitivity._inverse` – the inverse sensitivity mechanism (Asi & Duchi 2020);
* :mod:`~dpkit.sensitivity._sample_aggregate` – sample-and-aggregate over privacy units (with
  the centre-of-attention aggregator of :mod:`~dpkit.sensitivity._centre`);
* :mod:`~dpkit.sensitivity._convexity` – a public-probability mixture of mechanisms;
* :mod:`~dpkit.sensitivity._teaching` – the (non-private!) local-sensitivity Laplace mechanism.

See docs/sensitivity.md for which method to use when, and the proofs.
"""

from dpkit.sensitivity._convexity import make_convex_combination
from dpkit.sensitivity._info import SampleAggregateInfo, SensitivityInfo
from dpkit.sensitivity._inverse import make_inverse_sensitivity
from dpkit.sensitivity._local import (
    distance_k_sensitivity,
    local_sensitivity,
    smooth_sensitivity,
)
from dpkit.sensitivity._ptr import PTRResult, make_propose_test_release
from dpkit.sensitivity._sample_aggregate import choose_m, make_sample_and_aggregate
from dpkit.sensitivity._smooth import make_smooth_sensitivity

__all__ = [
    "PTRResult",
    "SampleAggregateInfo",
    "SensitivityInfo",
    "choose_m",
    "distance_k_sensitivity",
    "local_sensitivity",
    "make_convex_combination",
    "make_inverse_sensitivity",
    "make_propose_test_release",
    "make_sample_and_aggregate",
    "make_smooth_sensitivity",
    "smooth_sensitivity",
]
