"""Mechanisms: ``make_*`` constructors returning :class:`~dpkit.core.framework.Measurement`."""

from dpkit.mechanisms.gaussian import make_discrete_gaussian, make_gaussian
from dpkit.mechanisms.laplace import make_geometric, make_laplace

__all__ = [
    "make_discrete_gaussian",
    "make_gaussian",
    "make_geometric",
    "make_laplace",
]
