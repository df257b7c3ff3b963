"""``python -m dpkit.cli``: the same as the ``dpkit`` console script."""

from dpkit.cli import main

main()
