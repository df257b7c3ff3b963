"""The aggregate families, one module each; importing this package registers them all."""

from dpkit.analytics._planner.families import (  # noqa: F401  (each module registers itself)
    _count,
    _histogram,
    _marginals,
    _mode,
    _moments,
    _quantile,
    _sums,
    _workload,
)
