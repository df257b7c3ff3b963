"""Strict CSV: one definition of a well-formed file, checked before any engine reads one.

DuckDB, pandas and Spark each read CSV files their own way, and on a malformed file they
disagreed and read part of it: one unbalanced quote at row 500 of 2,000 made a reader take
the rest of the file as one field (499 rows, and a DP count of about 470 with exit 0), a stray
quote inside a field was a literal to one engine and a broken line to another (2,000 rows vs
1,999), bad bytes were replaced or dropped. A silently partial read is the worst kind of wrong
answer, so dpkit reads a CSV file strictly and identically on every engine: the whole file, or
an :class:`~dpkit.errors.UnreadableDataError`, never a skipped line.

**A well-formed file** (RFC 4180, with the choices below):

* UTF-8 (a byte-order mark at the start is allowed), with no NUL byte;
* records end with LF, or all of them with CRLF (the last one may end the file instead; one
  file, one line ending: DuckDB's strict reader refuses a mix); a carriage return anywhere
  else — a lone CR, or inside a quoted field — is refused, because Spark turns a CRLF inside a
  quoted field into LF where DuckDB and pandas keep it;
* every record has as many fields as the header, separated by commas; empty lines are skipped
  (all three engines skip them alike);
* a field is either quoted as a whole (``"..."``, with ``""`` for a quote inside; it may hold
  commas and line breaks) or holds no quote at all: ``ab"c`` and ``"ab"c`` are refused.

The check is vectorised (numpy over 8 MiB chunks) and runs once per version of the file (its
size, modification time and inode), when a plan first reads it — after the Session reserved
the query's budget, since the file is private. :func:`check_csv` runs the same check for the
data owner, locally, and says which line is wrong (never quoting it).
"""

from __future__ import annotations

import codecs
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpkit.errors import UnreadableDataError

__all__ = ["CSVProblem", "StrictCSV", "check_csv", "csv_problem", "file_stamp"]

_CHUNK = 1 << 23
_QUOTE, _COMMA, _LF, _CR = 34, 44, 10, 13
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class CSVProblem:
    """Where a CSV file first departs from the strict format: its physical line (1-based) and
    what is wrong, in words that never quote the data."""

    line: int
    problem: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.problem}"


_KIND = np.zeros(256, dtype=np.uint8)
_KIND[[_QUOTE, _COMMA, _LF, _CR]] = [1, 2, 3, 4]
_IS_QUOTE, _IS_COMMA, _IS_LF, _IS_CR = 1, 2, 3, 4
_MAY_PRECEDE_QUOTE = _KIND > 0  # a quote may open a field after these bytes, or a closing quote
_MAY_FOLLOW_CLOSER = np.append(_KIND > 0, True)  # ... and the end of the chunk (index 256)


def _first(mask: np.ndarray) -> int | None:
    return int(np.argmax(mask)) if mask.any() else None


def _at(
    problems: list[tuple[int, str]], positions: np.ndarray, mask: np.ndarray, what: str
) -> None:
    i = _first(mask)
    if i is not None:
        problems.append((int(positions[i]), what))


def csv_problem(path: str | Path, columns: int | None = None) -> CSVProblem | None:
    """The first way ``path`` is not a well-formed CSV file (module docstring), or None.

    ``columns``: the number of fields every record must have (default: the first record's).
    Vectorised over the positions of the four bytes that give a CSV file its structure (quote,
    comma, LF, CR), so it costs a few passes of numpy over the bytes.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    parity = 0  # quotes seen so far, mod 2
    prev_byte, prev_closer, prev_cr = _LF, False, False
    commas = content = 0  # of the record in progress
    lines = 0  # LF bytes before the chunk
    expected = columns
    opener_line = 0
    crlf_file: bool | None = None  # whether records end with CRLF (else LF), from the first
    with open(path, "rb") as handle:
        first = True
        while True:
            chunk = handle.read(max(_CHUNK, 3) if first else _CHUNK)
            last = len(chunk) < _CHUNK
            if first and chunk.startswith(_BOM):
                chunk = chunk[len(_BOM) :]
            first = False
            if not chunk:
                break
            problems: list[tuple[int, str]] = []
            nul = chunk.find(b"\x00")
            if nul >= 0:
                problems.append((nul, "a NUL byte (is the file UTF-16, or binary?)"))
            try:
                decoder.decode(chunk, final=last)
            except UnicodeDecodeError as error:
                problems.append(
                    (max(0, min(error.start, len(chunk) - 1)), "bytes that are not UTF-8")
                )
            b = np.frombuffer(chunk, dtype=np.uint8)
            kinds = _KIND[b]
            pos = np.flatnonzero(kinds)  # the structural candidates, in order
            kind = kinds[pos]
            quote = kind == _IS_QUOTE
            quotes_before = np.cumsum(quote, dtype=np.int64) - quote + parity
            inside = (quotes_before & 1).astype(bool)
            opener, closer = quote & ~inside, quote & inside
            outside = ~inside & ~quote
            before = b[np.maximum(pos - 1, 0)]
            before[pos == 0] = prev_byte
            nxt = pos + 1
            has_next = nxt < b.size
            after = np.full(pos.size, 256, dtype=np.int16)  # 256: the chunk ends here
            after[has_next] = b[nxt[has_next]]
            if prev_closer and b[0] not in (_QUOTE, _COMMA, _LF, _CR):
                problems.append((0, "text after the closing quote of a field"))
            if prev_cr and b[0] != _LF:
                problems.append((0, "a carriage return that does not end a line"))
            _at(
                problems,
                pos,
                opener & ~_MAY_PRECEDE_QUOTE[before],
                'a quote inside a field that does not start with one (write "a""b" for a"b)',
            )
            _at(
                problems,
                pos,
                closer & ~_MAY_FOLLOW_CLOSER[after],
                "text after the closing quote of a field",
            )
            cr = kind == _IS_CR
            _at(problems, pos, cr & inside, "a carriage return inside a quoted field")
            structural_cr = cr & outside
            _at(
                problems,
                pos,
                structural_cr & has_next & (after != _LF),
                "a carriage return that does not end a line",
            )
            lf = (kind == _IS_LF) & outside
            comma = (kind == _IS_COMMA) & outside
            ends = np.flatnonzero(lf)  # indices into pos
            comma_sum = np.cumsum(comma, dtype=np.int64)
            if ends.size:
                end_at = pos[ends]
                rec_commas = np.diff(comma_sum[ends], prepend=0)
                rec_commas[0] += commas
                # a record's content: its bytes but the LF and a CR right before it (a CR at
                # the end of the previous chunk was taken off ``content`` already)
                cr_before = (end_at > 0) & (b[np.maximum(end_at - 1, 0)] == _CR)
                starts = np.concatenate(([0], end_at[:-1] + 1))
                rec_content = end_at - starts - cr_before
                rec_content[0] += content
                crlf = cr_before.copy()
                if end_at[0] == 0:
                    crlf[0] = prev_cr
                if crlf_file is None:
                    crlf_file = bool(crlf[0])
                i = _first(crlf != crlf_file)
                if i is not None:
                    ending = ("LF", "CRLF") if crlf_file else ("CRLF", "LF")
                    problems.append(
                        (
                            int(end_at[i]),
                            f"a line ending in {ending[1]} where the header's ends "
                            f"in {ending[0]} (one file, one line ending)",
                        )
                    )
                filled = rec_content > 0
                if expected is None and filled.any():
                    expected = int(rec_commas[np.argmax(filled)]) + 1
                if expected is not None:
                    i = _first(filled & (rec_commas != expected - 1))
                    if i is not None:
                        fields = int(rec_commas[i]) + 1
                        problems.append(
                            (int(end_at[i]), f"{fields} fields where the header has {expected}")
                        )
                commas = int(comma_sum[-1] - comma_sum[ends[-1]])
                content = int(b.size - end_at[-1] - 1)
            else:
                commas += int(comma_sum[-1]) if comma_sum.size else 0
                content += b.size
            if problems:
                position, what = min(problems)
                return CSVProblem(lines + chunk.count(b"\n", 0, position) + 1, what)
            if opener.any():
                last_opener = int(pos[np.flatnonzero(opener)[-1]])
                opener_line = lines + chunk.count(b"\n", 0, last_opener) + 1
            parity = int(quotes_before[-1] + quote[-1]) & 1 if pos.size else parity
            prev_byte = int(b[-1])
            prev_closer = bool(pos.size and pos[-1] == b.size - 1 and closer[-1])
            prev_cr = bool(pos.size and pos[-1] == b.size - 1 and structural_cr[-1])
            if prev_cr:
                content -= 1  # the CR of a CRLF split across chunks is not content
            lines += chunk.count(b"\n")
            if last:
                break
    if parity:
        return CSVProblem(opener_line, "a quoted field that is never closed (an unbalanced quote)")
    if prev_cr:
        return CSVProblem(lines + 1, "a carriage return that does not end a line")
    if content > 0 and expected is not None and commas != expected - 1:
        return CSVProblem(lines + 1, f"{commas + 1} fields where the header has {expected}")
    return None


def check_csv(path: str | Path) -> None:
    """Check that ``path`` is a CSV file every dpkit engine reads whole and alike.

    For the data owner, locally: the error names the first bad line and what is wrong with it
    (never its contents). A query over the file runs the same check after its budget was
    reserved, and then withholds the line (it is private).

    Raises:
        UnreadableDataError: the file is not well formed (see :mod:`dpkit.analytics._engines._csv`).

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "broken.csv"
        >>> _ = path.write_text('id,city\\n1,Paris\\n2,"Lyon\\n3,Nice\\n')
        >>> try:
        ...     check_csv(path)
        ... except UnreadableDataError as error:
        ...     print(str(error).split(": ", 1)[1])
        line 3: a quoted field that is never closed (an unbalanced quote).
    """
    problem = csv_problem(path)
    if problem is not None:
        raise UnreadableDataError(f"{path} is not a well-formed CSV file: {problem}.")


def file_stamp(path: str) -> tuple[int, int, int]:
    """A file's version as the engines compare it: size, modification time (ns) and inode."""
    st = os.stat(path)
    return (st.st_size, st.st_mtime_ns, st.st_ino)


class StrictCSV:
    """The check an engine runs before it reads a CSV file: once per version of the file."""

    def __init__(self, path: str, columns: int) -> None:
        self.path = path
        self.columns = columns
        self._checked: tuple[int, int, int] | None = None
        self._lock = threading.Lock()

    def ensure(self) -> None:
        """Raise :class:`UnreadableDataError` (withholding the line: the file is private) unless
        the file, as it is now, is well formed."""
        try:
            stamp = file_stamp(self.path)
        except OSError as error:
            raise UnreadableDataError(
                f"{Path(self.path).name} could not be read ({error.strerror or 'I/O error'})"
            ) from None
        if stamp == self._checked:
            return
        with self._lock:
            if stamp == self._checked:
                return
            if csv_problem(self.path, self.columns) is not None:
                raise UnreadableDataError(
                    f"{Path(self.path).name} is not a well-formed CSV file. dpkit reads a CSV file "
                    "whole and strictly (UTF-8; one header; every line with as many fields, "
                    'separated by commas; quotes only around whole fields, with "" for a quote '
                    "inside), never skipping a line; which line is wrong is not shown because it "
                    'could tell something about the data. Find it locally: python -c "from '
                    f'dpkit.analytics import check_csv; check_csv({self.path!r})"'
                )
            self._checked = stamp
