"""The real programs of the ground-truth benchmark, and their generated inputs.

Each workload is a command line over an input file this module writes; the
inputs come from fixed seeds, so every run of the benchmark sees the same
programs doing the same work.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from dataclasses import dataclass

CC1 = "/usr/lib/gcc/x86_64-linux-gnu/12/cc1"
TEST_WORKLOADS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "workloads")


@dataclass(frozen=True)
class Workload:
    name: str
    what: str
    argv: tuple[str, ...]      # {input} and {out} are replaced by paths
    threads: int = 1
    scale: float = 1.0         # input size, sized for 15-40 intervals of 100M


WORKLOADS = (
    Workload("bzip2", "bzip2 -9 -c on 6 sections: text, random bytes, CSV, long runs, "
                      "DNA-like, binary records",
             ("bzip2", "-9", "-c", "{input}"), scale=3.0),
    Workload("cc1", "cc1 -O2 on a generated C file of 120 functions",
             (CC1, "-quiet", "-O2", "{input}", "-o", "{out}"), scale=0.3),
    Workload("perl", "perl: regex and hash text processing, then Mandelbrot, "
                     "matrix multiply and a sieve",
             ("perl", "{input}")),
    Workload("xz-T2", "xz -T2 -6 on the mixed file (two compressing threads)",
             ("xz", "-T2", "-6", "--block-size=1MiB", "-c", "{input}"), threads=2, scale=2.0),
    Workload("gzip", "gzip -9 -c on the six kinds of section",
             ("gzip", "-9", "-c", "{input}")),
    Workload("sqlite3", "sqlite3 in memory: insert 200,000 rows, build an index, group, "
                        "scan strings with LIKE, join on the index",
             ("sqlite3", ":memory:", ".read {input}")),
    Workload("node", "node (V8's JIT): regular expressions and a Map, then floating-point "
                     "arithmetic, then objects sorted and grouped",
             ("node", "{input}")),
    Workload("closefns", "a C program: hash loop, pointer-chasing walk, hash loop again, "
                         "the two functions adjacent in .text (tests/workloads/closefns.c)",
             ("{input}", "--iterations", "60000000")),
)


def available(w: Workload) -> str | None:
    """Why the workload cannot run here, or None."""
    exe = w.argv[0]
    if exe == "{input}":            # a program built from tests/workloads
        return None if shutil.which("gcc") and shutil.which("make") else "gcc or make is missing"
    if os.path.isabs(exe):
        return None if os.access(exe, os.X_OK) else f"{exe} is not installed"
    return None if shutil.which(exe) else f"{exe} is not installed"


def write_input(w: Workload, path: str, scale: float = 1.0) -> None:
    writer = {"bzip2": mixed_file, "xz-T2": mixed_file, "gzip": mixed_file, "cc1": c_source,
              "perl": perl_script, "sqlite3": sql_script, "node": node_script,
              "closefns": closefns}[w.name]
    writer(path, scale)


def mixed_file(path: str, scale: float) -> None:
    """Sections that take different code paths in a compressor."""
    rng = random.Random(10)
    size = max(int(512 * 1024 * scale), 4096)
    words = ["phase", "voltage", "frequency", "interval", "profile", "kernel", "sample",
             "cluster", "centroid", "program", "the", "of", "and", "a", "to", "in"]
    sections = []
    sections.append(_lines(size, lambda: " ".join(
        rng.choice(words) for _ in range(rng.randint(5, 15))) + ".\n"))
    sections.append(rng.randbytes(size))
    sections.append(_lines(size, lambda: f"{rng.randint(0, 10**6)},{rng.random():.6f},"
                                         f"{rng.choice(words)},{rng.randint(-500, 500)}\n"))
    runs = bytearray()
    while len(runs) < size:
        runs += bytes([rng.randrange(256)]) * rng.randint(50, 5000)
    sections.append(bytes(runs[:size]))
    sections.append(bytes(rng.choice(b"ACGT") for _ in range(size)))
    recs = bytearray()
    while len(recs) < size:
        recs += rng.randint(0, 2**31).to_bytes(4, "little") + bytes(12) \
            + rng.randbytes(8) + b"\x00\x01\x02\x03"
    sections.append(bytes(recs[:size]))
    with open(path, "wb") as f:
        for s in sections:
            f.write(s)


def _lines(size: int, line) -> bytes:
    out, n = [], 0
    while n < size:
        out.append(line())
        n += len(out[-1])
    return "".join(out).encode()[:size]


def c_source(path: str, scale: float) -> None:
    rng = random.Random(11)
    n = max(int(400 * scale), 4)
    with open(path, "w") as f:
        f.write("struct node { int v; struct node *next; double w[4]; };\n")
        for i in range(n):
            kind = i % 4
            f.write(f"int f{i}(int *a, int n, struct node *p) {{\n  int s = {rng.randint(0, 99)};\n")
            for j in range(rng.randint(4, 12)):
                if kind == 0:
                    f.write(f"  for (int i = 0; i < n; i++) s += a[i] * {j + 1} ^ (s >> {j % 7 + 1});\n")
                elif kind == 1:
                    f.write(f"  while (p) {{ s += p->v * {j + 2}; p->w[{j % 4}] += s; p = p->next; }}\n")
                elif kind == 2:
                    f.write(f"  switch (s % {j + 3}) {{ case 0: s += {j}; break; case 1: s -= a[{j}]; "
                            f"break; default: s ^= {j * 7}; }}\n")
                else:
                    f.write(f"  if (s > {j * 11}) s = f{max(i - 1, 0)}(a, n - 1, p) + {j}; "
                            f"else s += n * {j};\n")
            f.write("  return s;\n}\n")


PERL = r"""
use strict; use warnings;
my $scale = %(scale)s;
# phase 1: regex and hash text processing
srand(12);
my @w = qw(phase voltage frequency interval profile kernel sample cluster centroid);
my %%count; my $hits = 0;
for my $i (1 .. int(60000 * $scale)) {
    my $line = join(" ", map { $w[rand @w] . int(rand 100) } 1 .. 8);
    while ($line =~ /(\w+?)(\d+)/g) { $count{$1} += $2; }
    $hits++ if $line =~ /^(?:phase|kernel)\d+ .*cluster\d/;
    (my $t = $line) =~ s/(\d+)/<$1>/g;
    $count{length $t}++;
}
# phase 2: Mandelbrot, matrix multiply, sieve
my $m = 0;
my $N = int(120 * sqrt($scale)) || 2;
for my $y (0 .. $N - 1) { for my $x (0 .. $N - 1) {
    my ($cr, $ci) = (2.0 * $x / $N - 1.5, 2.0 * $y / $N - 1.0);
    my ($zr, $zi, $k) = (0, 0, 0);
    while ($k < 50 && $zr * $zr + $zi * $zi < 4) {
        ($zr, $zi) = ($zr * $zr - $zi * $zi + $cr, 2 * $zr * $zi + $ci); $k++;
    }
    $m += $k;
} }
my $S = int(60 * sqrt($scale)) || 2;
my @A = map { [map { rand } 1 .. $S] } 1 .. $S;
my @C;
for my $i (0 .. $S - 1) { for my $j (0 .. $S - 1) {
    my $s = 0; $s += $A[$i][$_] * $A[$_][$j] for 0 .. $S - 1; $C[$i][$j] = $s;
} }
my $L = int(400000 * $scale) || 100;
my @sieve = (1) x $L; my $primes = 0;
for my $p (2 .. $L - 1) { next unless $sieve[$p]; $primes++;
    for (my $q = $p * $p; $q < $L; $q += $p) { $sieve[$q] = 0 } }
print "$hits $m $primes\n";
"""


def perl_script(path: str, scale: float) -> None:
    with open(path, "w") as f:
        f.write(PERL % {"scale": scale})


SQL = """
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, s TEXT, x REAL);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < %(rows)d)
INSERT INTO t SELECT i, (i * 7919) %% 10007,
    printf('%%x-%%x-%%x', (i * 2654435761) %% 4294967291, (i * 40503) %% 65521, i),
    (i %% 1000) / 7.0 FROM c;
CREATE INDEX t_k ON t(k);
SELECT k, count(*), avg(x) FROM t GROUP BY k ORDER BY 3 DESC LIMIT 3;
SELECT count(*) FROM t WHERE s LIKE '%%ab%%cd%%';
SELECT count(*), sum(b.x) FROM t a JOIN t b ON a.k = b.k WHERE a.id < %(join)d AND b.id %% 3 = 0;
"""


def sql_script(path: str, scale: float) -> None:
    with open(path, "w") as f:
        f.write(SQL % {"rows": int(200_000 * scale), "join": int(40_000 * scale)})


NODE = """'use strict';
// phase 1: strings, regular expressions and a Map
const count = new Map();
for (let i = 0; i < %(strings)d; i++) {
  const s = 'k' + ((i * 7919) %% 10007) + '-' + (i %% 97) + ' w' + (i %% 13);
  const m = /k(\\d+)-(\\d+) w(\\d+)/.exec(s);
  count.set(m[1], (count.get(m[1]) || 0) + Number(m[2]) * Number(m[3]));
}
// phase 2: floating-point arithmetic in a tight loop
let acc = 0;
for (let i = 1; i < %(floats)d; i++) acc += Math.sqrt(i) * ((i & 7) - 3.5) / i;
// phase 3: objects, sorting and closures
const rows = [];
for (let i = 0; i < %(objects)d; i++) {
  rows.push({ id: i, key: (i * 2654435761) %% 4294967291, tag: 't' + (i %% 101) });
}
rows.sort((a, b) => a.key - b.key);
const groups = {};
for (const r of rows) (groups[r.tag] = groups[r.tag] || []).push(r.id);
console.log(count.size, acc.toFixed(3), Object.keys(groups).length);
"""


def node_script(path: str, scale: float) -> None:
    with open(path, "w") as f:
        f.write(NODE % {"strings": int(300_000 * scale), "floats": int(30_000_000 * scale),
                        "objects": int(200_000 * scale)})


def closefns(path: str, scale: float) -> None:
    """Builds the program itself (the workload's "input")."""
    out = os.path.dirname(path)
    subprocess.run(["make", "-s", "-C", TEST_WORKLOADS, f"OUT={out}", "CC=gcc",
                    os.path.join(out, "closefns")], check=True)
    os.replace(os.path.join(out, "closefns"), path)
