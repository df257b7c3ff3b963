"""Private machinery of the ladder (neighbour-set) mechanism; the public API is
:mod:`dpkit.mechanisms` (make_ladder and friends). See src/dpkit/mechanisms/ladder.md for the
proofs this code relies on."""
