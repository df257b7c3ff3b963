"""``python -m dpkit`` and the ``dpkit`` console script.

The command line needs the ``cli`` extra; without it this prints the one line that says what to
install (``pip install 'dpkit[cli]'``) instead of a traceback.
"""

from __future__ import annotations

import sys

from dpkit._extras import MissingExtraError

__all__ = ["main"]


def main() -> None:
    """Run the ``dpkit`` command (:func:`dpkit.cli.main`)."""
    try:
        from dpkit.cli import main as cli_main
    except MissingExtraError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    cli_main()


if __name__ == "__main__":
    main()
