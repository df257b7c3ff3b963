"""Property tests of the strict CSV check (issue 21) and of identical reading.

* The vectorised check (:func:`dpkit.analytics._engines._csv.csv_problem`), whatever its chunk
  size, agrees with a plain character-by-character reference of the same rules on random byte
  strings built from the bytes that matter (quote, comma, CR, LF, NUL, bad UTF-8).
* Every well-formed file (a random table written by Python's csv module, with commas, quotes,
  line breaks, empty strings and odd Unicode in its texts) is read by DuckDB and the pandas
  reference engine into the same exact aggregates; Spark reads fixed files in
  tests/engines/test_strict_csv.py.
"""

from __future__ import annotations

import csv
import io
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpkit.analytics._engines import _csv

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engines"))
from _engine_oracle import result_dict

PROPS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
ALPHABET = [b"a", b"b", b",", b'"', b"\n", b"\r", b"\r\n", b"\x00", b"\xff", "é".encode()]


def reference_ok(data: bytes, columns: int | None = None) -> bool:
    """The module's rules, one character at a time (no numpy, no chunks)."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    records: list[tuple[int, bool | None, int]] = []  # (fields, ends with CRLF, content bytes)
    fields, content, state, i, n = 1, 0, "start", 0, len(data)

    def end_record(crlf: bool | None) -> None:
        nonlocal fields, content, state
        records.append((fields, crlf, content))
        fields, content, state = 1, 0, "start"

    while i < n:
        c = data[i : i + 1]
        if state == "quoted":
            if c == b'"':
                if data[i + 1 : i + 2] == b'"':
                    content, i = content + 2, i + 2
                    continue
                state = "closed"
            elif c == b"\r":
                return False
            content, i = content + 1, i + 1
            continue
        if c == b",":
            fields, content, state = fields + 1, content + 1, "start"
        elif c == b"\n":
            end_record(False)
        elif c == b"\r":
            if data[i + 1 : i + 2] != b"\n":
                return False
            end_record(True)
            i += 1
        elif c == b'"':
            if state != "start":
                return False
            state, content = "quoted", content + 1
        else:
            if state == "closed":
                return False
            state, content = "unquoted", content + 1
        i += 1
    if state == "quoted":
        return False
    if content > 0 or state != "start":
        records.append((fields, None, content))
    endings = [crlf for _, crlf, _ in records if crlf is not None]
    if endings and any(e != endings[0] for e in endings):
        return False
    filled = [f for f, _, size in records if size > 0]
    expected = columns if columns is not None else (filled[0] if filled else None)
    return all(f == expected for f in filled)


@PROPS
@given(
    parts=st.lists(st.sampled_from(ALPHABET), max_size=60),
    header=st.booleans(),
    chunk=st.sampled_from([1, 2, 3, 5, 8, 1 << 23]),
)
def test_the_vectorised_check_is_the_reference(
    parts: list[bytes], header: bool, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = (b"u,x\n" if header else b"") + b"".join(parts)
    monkeypatch.setattr(_csv, "_CHUNK", chunk)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "f.csv"
        path.write_bytes(data)
        assert (_csv.csv_problem(path) is None) == reference_ok(data), data


TEXT = st.text(alphabet=st.sampled_from(list("ab ,\"\n'é\u00a0\u200b\U0001f600\\;\t#")), max_size=8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(st.tuples(st.integers(0, 30), TEXT, st.integers(-5, 5)), min_size=1, max_size=40),
    crlf=st.booleans(),
    bom=st.booleans(),
)
def test_every_engine_reads_a_well_formed_file_alike(
    rows: list[tuple[int, str, int]], crlf: bool, bom: bool
) -> None:
    from dpkit.analytics._engines import DuckDBEngine, PandasEngine
    from dpkit.analytics._engines._base import BoundedPlan, Output, ValueSpec
    from dpkit.analytics._query import KeySet

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n" if crlf else "\n")
    writer.writerow(["u", "t", "x"])
    writer.writerows(rows)
    data = ("\ufeff" if bom else "") + buffer.getvalue()
    if crlf and any("\n" in t for _, t, _ in rows):
        return  # a CRLF file's quoted line breaks are LF here: refused, checked elsewhere
    texts = sorted({t for _, t, _ in rows if t != ""})
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "f.csv"
        path.write_bytes(data.encode("utf-8"))
        assert _csv.csv_problem(path) is None
        keys = KeySet.from_values("t", texts) if texts else None
        plan = BoundedPlan(
            (),
            "u",
            ("t",) if texts else (),
            keys,
            None,
            None,
            None,
            7,
            (ValueSpec("x", -5.0, 5.0, 0),),
            (Output("rows"), Output("units"), Output("sum", 0), Output("nonnull", 0)),
        )
        schema = {"x": "numeric", "u": "numeric"}
        results = []
        for engine in (
            PandasEngine(str(path), schema=schema),
            DuckDBEngine(str(path), schema=schema),
        ):
            results.append(result_dict(engine.run(plan), plan))
            engine.close()
        assert results[0] == results[1]
        expected_rows = len(rows) if not texts else sum(1 for _, t, _ in rows if t != "")
        assert sum(outputs[0] for outputs in results[0].values()) == expected_rows
        assert sum(outputs[2] for outputs in results[0].values()) == sum(
            x for _, t, x in rows if t != "" or not texts
        )


def test_reference_agrees_on_the_named_malformations() -> None:
    cases: dict[bytes, bool] = {
        b'u,x\n1,a\n2,"b\n3,c\n': False,  # unbalanced quote: the rest of the file in one field
        b'u,x\n1,a\n2,b"c\n': False,  # stray quote inside a field
        b'u,x\n1,a"b"\n2,c\n': False,  # a pair of them (balanced: no unterminated field)
        b'u,x\n1,a\n2,"b"c\n': False,  # text after the closing quote
        b"u,x\n1,a\n2,b,c\n": False,  # ragged: too many fields
        b"u,x\n1,a\n2\n": False,  # ragged: too few
        b"u,x\n1,\xff\n": False,  # bad encoding
        b"u,x\n1,a\x00b\n": False,  # embedded NUL
        b"u,x\r\n1,a\n": False,  # mixed line endings
        b'u,x\n1,"a\r\nb"\n': False,  # CR inside a quoted field
        b'u,x\n1,"a,""b""\nc"\n\n2,\n': True,
        b"\xef\xbb\xbfu,x\r\n1,a\r\n": True,
    }
    for data, ok in cases.items():
        assert reference_ok(data) is ok, data
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "f.csv"
            path.write_bytes(data)
            assert (_csv.csv_problem(path) is None) is ok, data
