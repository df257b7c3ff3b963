"""dpkit.testing: privacy checks you can run on any mechanism, including your own.

* Exact and numerical checks: recompute the privacy loss from the
  noise distribution a mechanism declares and compare it with the claim —
  :func:`check_measurement_exact`, :func:`check_tiered_pure_dp`, :func:`check_lattice_approx_dp`,
  :func:`check_lattice_zcdp`, :func:`check_finite_pure_dp`, :func:`check_finite_approx_dp`,
  :func:`check_finite_zcdp`.
* Statistical audits: a confidence lower bound on the real loss from
  releases on neighbouring inputs — :func:`audit_measurement`, :func:`audit_samples`,
  :func:`audit_samples_zcdp`.
* The neighbour-failure check: an exception is an output, so
  neighbouring inputs must fail alike — :func:`check_failure_behaviour`,
  :func:`check_session_failures`, :func:`add_one_unit`.
* A conformance suite every mechanism should pass:
  :func:`check_mechanism` runs every check; :func:`mechanism_checks` yields them one by one and
  :func:`parametrize_mechanism_checks` makes each its own pytest test.

Each returns a result with ``passed`` and ``raise_if_failed()``, which raises
:class:`dpkit.errors.PrivacyCheckError`. See docs/verification.md.
"""

from dpkit.testing._audit import AuditResult, audit_measurement, audit_samples, audit_samples_zcdp
from dpkit.testing._conformance import (
    CHECKS,
    OMIT,
    CheckOutcome,
    ConformanceReport,
    MechanismCheck,
    check_mechanism,
    mechanism_checks,
    parametrize_mechanism_checks,
)
from dpkit.testing._exact import (
    DEFAULT_ALPHAS,
    CheckResult,
    check_finite_approx_dp,
    check_finite_pure_dp,
    check_finite_zcdp,
    check_lattice_approx_dp,
    check_lattice_zcdp,
    check_measurement_exact,
    check_tiered_pure_dp,
)
from dpkit.testing._failures import (
    EXTREME_FLOATS,
    FailureCheckResult,
    add_one_unit,
    check_failure_behaviour,
    check_session_failures,
)

__all__ = [
    "CHECKS",
    "DEFAULT_ALPHAS",
    "EXTREME_FLOATS",
    "OMIT",
    "AuditResult",
    "CheckOutcome",
    "CheckResult",
    "ConformanceReport",
    "FailureCheckResult",
    "MechanismCheck",
    "add_one_unit",
    "audit_measurement",
    "audit_samples",
    "audit_samples_zcdp",
    "check_failure_behaviour",
    "check_finite_approx_dp",
    "check_finite_pure_dp",
    "check_finite_zcdp",
    "check_lattice_approx_dp",
    "check_lattice_zcdp",
    "check_measurement_exact",
    "check_mechanism",
    "check_session_failures",
    "check_tiered_pure_dp",
    "mechanism_checks",
    "parametrize_mechanism_checks",
]
