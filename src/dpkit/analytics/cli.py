"""Moved: ``dpkit query`` lives in :mod:`dpkit.cli.query` (every command in one place) and the
release printer in :mod:`dpkit.cli.render`; these names are kept for existing imports."""

from dpkit.cli.query import query_command
from dpkit.cli.render import render_release

__all__ = ["query_command", "render_release"]
