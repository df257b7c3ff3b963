"""Private machinery of the ladder (neighbour-set) mechanism; the public API is
:mod:`dpkit.mechanisms.ladder`. See src/dpkit/mechanisms/ladder.md for the construction and the
proofs this code relies on."""
