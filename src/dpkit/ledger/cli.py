"""Moved: ``dpkit budget`` lives in :mod:`dpkit.cli.budget` (every command in one place)."""

from dpkit.cli.budget import budget_app, write_consumption_plot

__all__ = ["budget_app", "write_consumption_plot"]
