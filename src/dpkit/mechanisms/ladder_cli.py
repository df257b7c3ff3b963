"""Moved: ``dpkit ladder`` lives in :mod:`dpkit.cli.ladder` (every command in one place)."""

from dpkit.cli.ladder import ladder_app

__all__ = ["ladder_app"]
