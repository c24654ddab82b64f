"""What code each entry of the code signature holds, so that the report can
label its rows: the IPs a run's samples hashed into each entry (through the
pipeline's own code map), counted, and named by the functions most of them
are in."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np

from ..core.batch import SampleBatch
from ..core.source import Sink
from ..live.function_names import fit_name
from ..live.sample_names import owner_column, sample_names
from ..live.symbolizer import Symbolizer
from ..live.tree_symbolizer import RecordedTree, TreeSymbolizer

#: A label's function name is fitted into this many characters: the
#: figure's labels beside a heatmap leave it most of the width.
LABEL_NAME_WIDTH = 24


class CodeEntries(Sink):
    """A sink taking each batch just before the pipeline does (the code map
    is then the one the batch is classified with); ``names`` labels entries."""

    def __init__(self, pipeline, symbolizer: Symbolizer | TreeSymbolizer | RecordedTree):
        self.pipeline = pipeline
        self.symbolizer = symbolizer
        self.owner = owner_column(symbolizer)
        self._seen: dict[int, Counter] = defaultdict(Counter)    # entry -> (ip, owner) -> n

    def batch(self, batch: SampleBatch) -> None:
        hist = self.pipeline.params.histograms
        if "ip" not in batch or len(batch) == 0 or hist.ip_signature == "fold":
            return
        ips = np.ascontiguousarray(batch["ip"])
        owners = batch[self.owner] if self.owner is not None and self.owner in batch \
            else np.zeros(len(ips), np.int64)
        for block, bits in enumerate((hist.code_region_bits, hist.code_line_bits)):
            self._count(self._entries(batch, ips, bits, block), ips, owners)

    def _entries(self, batch: SampleBatch, ips: np.ndarray, bits: int, block: int) -> np.ndarray:
        """Each IP's entry in the signature's ``block`` (regions, then lines)."""
        hist = self.pipeline.params.histograms
        entries = np.empty(len(ips), np.int32)
        self.pipeline.code_map.bins(ips, np.ascontiguousarray(batch["t_ns"]), bits,
                                    hist.code_bins, entries, pids=batch.get("pid"))
        return np.where(entries >= 0, entries + block * hist.code_bins, -1)

    def _count(self, entries: np.ndarray, ips: np.ndarray, owners) -> None:
        keys = np.stack([entries.astype(np.int64), ips.astype(np.int64),
                         np.asarray(owners, np.int64)], axis=1)
        rows, counts = np.unique(keys, axis=0, return_counts=True)
        for (entry, ip, owner), n in zip(rows.tolist(), counts.tolist()):
            if entry >= 0:
                self._seen[entry][(ip & 0xFFFFFFFFFFFFFFFF, owner)] += n

    def names(self, entries) -> dict[int, str]:
        """A label per entry: the function with most of its samples (its name
        shortened), and how many others share the entry."""
        labels = {}
        for entry in entries:
            seen = self._seen.get(int(entry))
            if not seen:
                continue
            pairs = list(seen)
            ips = np.array([ip for ip, _ in pairs], np.uint64)
            owners = np.array([owner for _, owner in pairs], np.int64)
            named = sample_names(self.symbolizer, ips, owners, offsets=False)
            by_name: Counter = Counter()
            for name, pair in zip(named.tolist(), pairs):
                by_name[name] += seen[pair]
            ranked = by_name.most_common()
            more = f" +{len(ranked) - 1}" if len(ranked) > 1 else ""
            labels[int(entry)] = f"{fit_name(ranked[0][0], LABEL_NAME_WIDTH)}{more}"
        return labels
