"""The aggregate families, one module each; importing this package registers them all."""

from dpkit.analytics.planner.families import (  # noqa: F401  (each module registers itself)
    count,
    histogram,
    marginals,
    mode,
    moments,
    quantile,
    sums,
    workload,
)
