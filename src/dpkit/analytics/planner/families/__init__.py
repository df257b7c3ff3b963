"""The aggregate families, one module each; importing this package registers them all."""

from dpkit.analytics.planner.families import (  # noqa: F401  (each module registers itself)
    _mode,
    count,
    histogram,
    marginals,
    moments,
    quantile,
    sums,
    workload,
)
