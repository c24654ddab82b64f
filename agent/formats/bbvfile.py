"""SimPoint basic-block vector files, as valgrind's exp-bbv writes them.

A ``.bb`` file has one line per interval, ``T:id:count :id:count ...``: the
instructions each basic block (numbered from 1) retired in that interval.
Lines starting with ``#`` are comments.  The ``--pc-out-file`` beside it names
each block: ``F:id:address:function``.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import UserError
from .inputs import open_regular

if TYPE_CHECKING:  # scipy is slow to import: only .bb files load it
    import scipy.sparse

_ENTRY = re.compile(r":(\d+):(\d+)")
#: The largest block id and count read: exp-bbv numbers blocks from 1 up and
#: counts the instructions of an interval (about 10^8); these bounds keep every
#: sum within 64 bits and every matrix within memory.
MAX_BLOCK_ID = 2**31 - 2
MAX_COUNT = 2**40
MAX_INTERVAL = 2**50


@dataclass
class BlockVectors:
    """Basic-block vectors as a sparse matrix: one row per interval, one column
    per block id (column 0 unused, as exp-bbv numbers blocks from 1)."""

    counts: "scipy.sparse.csr_matrix"

    def __len__(self) -> int:
        return self.counts.shape[0]

    @property
    def instructions(self) -> np.ndarray:
        return np.asarray(self.counts.sum(axis=1)).ravel().astype(np.int64)


def looks_like_bb(path: str) -> bool:
    """True for a file whose first non-comment line is an exp-bbv ``T:`` line."""
    try:
        with open_regular(path) as f:
            head = f.read(4096)
    except (OSError, UserError):
        return False
    for line in head.splitlines():
        line = line.strip()
        if line and not line.startswith(b"#"):
            return line.startswith(b"T:")
    return False


def read_bb(path: str) -> BlockVectors:
    rows, cols, vals = [], [], []
    n = 0
    raw = open_regular(path, ".bb")
    try:
        with io.TextIOWrapper(raw, encoding="ascii", errors="replace") as f:
            for lineno, line in enumerate(f, start=1):
                text = line.strip()
                if not text or text.startswith("#"):
                    continue
                ids, counts = _parse_line(text, path, lineno)
                rows.append(np.full(len(ids), n, np.int64))
                cols.append(ids)
                vals.append(counts)
                n += 1
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    if n == 0:
        raise UserError(f"{path}: no intervals (no 'T:' lines): is it valgrind exp-bbv output?")
    cols_all = np.concatenate(cols)
    import scipy.sparse as sp  # only for .bb files: scipy is slow to import
    matrix = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), cols_all)),
                           shape=(n, int(cols_all.max()) + 1 if len(cols_all) else 1))
    matrix.sum_duplicates()
    totals = np.asarray(matrix.sum(axis=1, dtype=np.float64)).ravel()
    if len(totals) and totals.max() > MAX_INTERVAL:
        row = int(np.argmax(totals))
        raise UserError(f"{path}: interval {row + 1} counts {totals[row]:.3g} instructions, "
                        f"beyond any real interval: not exp-bbv output")
    return BlockVectors(matrix)


def _parse_line(text: str, path: str, lineno: int) -> tuple[np.ndarray, np.ndarray]:
    if not text.startswith("T"):
        raise UserError(f"{path}:{lineno}: expected a 'T:id:count ...' line, found "
                        f"{text[:40]!r}: give a .bb file from valgrind --tool=exp-bbv")
    body = text[1:]
    pairs = _ENTRY.findall(body)
    if not pairs:
        raise UserError(f"{path}:{lineno}: no ':id:count' entries on a 'T:' line")
    bad = _ENTRY.sub(" ", body).split()
    if bad:
        what = repr(bad[0][:40])
        raise UserError(f"{path}:{lineno}: malformed basic-block entry {what}: "
                        f"each entry is ':id:count' with decimal integers")
    for block, count in pairs:
        if len(block) > 10 or len(count) > 13 or not (0 < int(block) <= MAX_BLOCK_ID
                                                     and int(count) <= MAX_COUNT):
            if int(block) == 0:
                raise UserError(f"{path}:{lineno}: block id 0: exp-bbv numbers blocks from 1")
            raise UserError(f"{path}:{lineno}: entry ':{block[:24]}:{count[:24]}' is out of "
                            f"range (block ids 1 to {MAX_BLOCK_ID:,}, counts up to "
                            f"{MAX_COUNT:,}): not exp-bbv output")
    arr = np.array(pairs, np.int64)
    return arr[:, 0], arr[:, 1]


def read_pc(path: str) -> dict[int, tuple[int, str]]:
    """Block id -> (address, function) from an exp-bbv ``--pc-out-file``."""
    blocks = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, start=1):
                parts = line.rstrip("\n").split(":", 3)
                if len(parts) < 3 or parts[0] != "F":
                    raise UserError(f"{path}:{lineno}: expected 'F:id:address:function'")
                try:
                    blocks[int(parts[1])] = (int(parts[2], 16), parts[3] if len(parts) > 3 else "")
                except ValueError:
                    raise UserError(f"{path}:{lineno}: block id or address is not a number") from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    return blocks


def read_symtab_mappings(log_path: str) -> list[dict]:
    """Executable mappings of the program valgrind ran, from its
    ``--trace-symtab=yes`` log: ``{"start", "end", "offset", "path"}`` per
    object (valgrind's own are left out), in the addresses of the
    ``--pc-out-file``, as a trace's ``mappings`` metadata."""
    out, name = [], None
    try:
        f = open(log_path, errors="replace")
    except OSError as exc:
        raise UserError(f"cannot read {log_path}: {exc.strerror}") from None
    with f:
        for line in f:
            if line.startswith("------ name = "):
                name = line[len("------ name = "):].strip()
            elif line.startswith("rx_map:") and name:
                m = re.match(r"rx_map:\s+avma (0x[0-9a-f]+)\s+size (\d+)\s+foff (\d+)", line)
                if m and "/valgrind/" not in name:
                    start = int(m[1], 16)
                    entry = {"start": start, "end": start + int(m[2]), "offset": int(m[3]),
                             "path": name}
                    if entry not in out:
                        out.append(entry)
                name = None
    return out
