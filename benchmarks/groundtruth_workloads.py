"""The real programs of the ground-truth benchmark, and their generated inputs.

Each workload is a program run on one input: NAME-INPUT, e.g. ``bzip2-mixed``
and ``bzip2-skew`` are bzip2 on two different inputs.  Each program has two
inputs that differ in what they make it do (other kinds of section, other
sizes and order, other script parts, other seeds), not only in size; closefns
is the exception, a control with one shape (A, B, A) kept from the first
version of the benchmark.  The inputs come from fixed seeds, so every run of
the benchmark sees the same programs doing the same work.  Sizes aim at 30 to
120 intervals of 100M instructions.

The split into a tuning half and a test half is :data:`HALVES` (by program,
both inputs of a program in the same half):

- tuning half: bzip2, xz-T2 (compressors), perl (interpreter), sqlite3
  (database), as (assembler), kvloop (a C request loop), closefns (control)
- test half: gzip, zstd (compressors), python3 (interpreter), cc1 (compiler),
  node (JIT), grep (regular expressions)
- unseen: sort (coreutils), awk (mawk), bc: added after every setting was
  chosen and scored once, to check the test half (a rule was once made after
  looking at it: docs/detection.md)

Detector settings may be chosen on the tuning half; figures are reported on
the test half and the unseen set.

Programs from Debian packages: bzip2, gzip, xz-utils, zstd, perl, sqlite3,
nodejs, python3, grep, coreutils (sort), mawk, bc, binutils (as) and gcc-12 (cc1; kvloop and closefns are
built with gcc).  ``available()`` says which package a missing one is in.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable

CC1 = "/usr/lib/gcc/x86_64-linux-gnu/12/cc1"
#: The interpreter itself, not a wrapper script (pyenv's shims are shell
#: scripts that exec python: a second process under valgrind).
PYTHON = "/usr/bin/python3"
TEST_WORKLOADS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "workloads")


@dataclass(frozen=True)
class Workload:
    name: str                  # PROGRAM-INPUT
    program: str               # the key of HALVES
    what: str
    argv: tuple[str, ...]      # {input}, {out} and {dir} are replaced by paths
    writer: Callable[[str, float], None]
    threads: int = 1
    scale: float = 1.0         # input size, sized for 30-120 intervals of 100M
    package: str = ""          # the Debian package of argv[0]


#: The fixed split: program -> "tuning" or "test".
HALVES = {
    "bzip2": "tuning", "xz-T2": "tuning", "perl": "tuning", "sqlite3": "tuning",
    "as": "tuning", "kvloop": "tuning", "closefns": "tuning",
    "gzip": "test", "zstd": "test", "python3": "test", "cc1": "test", "node": "test",
    "grep": "test",
    "sort": "unseen", "awk": "unseen", "bc": "unseen",
}


def half(w: "Workload") -> str:
    return HALVES[w.program]


# ---------------------------------------------------------------- mixed files

_WORDS = ["phase", "voltage", "frequency", "interval", "profile", "kernel", "sample",
          "cluster", "centroid", "program", "the", "of", "and", "a", "to", "in"]


def _text(rng, size):
    return _lines(size, lambda: " ".join(
        rng.choice(_WORDS) for _ in range(rng.randint(5, 15))) + ".\n")


def _random(rng, size):
    return rng.randbytes(size)


def _csv(rng, size):
    return _lines(size, lambda: f"{rng.randint(0, 10**6)},{rng.random():.6f},"
                                f"{rng.choice(_WORDS)},{rng.randint(-500, 500)}\n")


def _runs(rng, size):
    runs = bytearray()
    while len(runs) < size:
        runs += bytes([rng.randrange(256)]) * rng.randint(50, 5000)
    return bytes(runs[:size])


def _dna(rng, size):
    return bytes(rng.choice(b"ACGT") for _ in range(size))


def _records(rng, size):
    recs = bytearray()
    while len(recs) < size:
        recs += rng.randint(0, 2**31).to_bytes(4, "little") + bytes(12) \
            + rng.randbytes(8) + b"\x00\x01\x02\x03"
    return bytes(recs[:size])


def _source(rng, size):
    """C-like source text: short repeated tokens, indentation, identifiers."""
    idents = [f"{a}_{b}" for a in ("buf", "len", "node", "ctx", "tmp", "val")
              for b in ("in", "out", "next", "prev", "cur")]
    return _lines(size, lambda: "    " * rng.randint(0, 4) + rng.choice([
        f"if ({rng.choice(idents)} > {rng.randint(0, 64)}) {{",
        f"{rng.choice(idents)} = {rng.choice(idents)} + {rng.randint(1, 9)};",
        f"return {rng.choice(idents)};", "}", f"for (i = 0; i < {rng.choice(idents)}; i++)",
        f"{rng.choice(idents)}->{rng.choice(idents)} = NULL;"]) + "\n")


def _sparse(rng, size):
    """Mostly zero bytes, a non-zero one every few hundred."""
    out = bytearray(size)
    i = 0
    while i < size:
        out[i] = rng.randrange(1, 256)
        i += rng.randint(1, 600)
    return bytes(out)


def _json(rng, size):
    return _lines(size, lambda: '{"id": %d, "name": "%s", "tags": [%s], "score": %.3f}\n' % (
        rng.randint(0, 10**7), rng.choice(_WORDS) + str(rng.randint(0, 999)),
        ", ".join('"%s"' % rng.choice(_WORDS) for _ in range(rng.randint(0, 5))), rng.random()))


SECTION = {"text": _text, "random": _random, "csv": _csv, "runs": _runs, "dna": _dna,
           "records": _records, "source": _source, "sparse": _sparse, "json": _json}

#: The first version's file: six kinds of section, 512 KiB each at scale 1.
PLAN_MIXED = (("text", 1), ("random", 1), ("csv", 1), ("runs", 1), ("dna", 1), ("records", 1))
#: Other kinds, other sizes, other order.
PLAN_SKEW = (("dna", 3), ("json", 1), ("random", 0.5), ("source", 2), ("runs", 1),
             ("sparse", 1.5), ("text", 0.5), ("csv", 1))
PLAN_SKEW_XZ = (("records", 2), ("source", 1.5), ("random", 1), ("sparse", 1),
                ("json", 2), ("dna", 0.5), ("runs", 1), ("text", 1))
PLAN_SKEW_ZSTD = (("json", 1.5), ("random", 0.5), ("dna", 2), ("records", 1),
                  ("source", 1), ("runs", 0.5), ("sparse", 1), ("csv", 1.5))


def mixed_file(plan=PLAN_MIXED, seed: int = 10):
    """A writer of sections that take different code paths in a compressor,
    each ``weight`` x 512 KiB x scale."""
    def write(path: str, scale: float) -> None:
        rng = random.Random(seed)
        with open(path, "wb") as f:
            for kind, weight in plan:
                f.write(SECTION[kind](rng, max(int(512 * 1024 * scale * weight), 4096)))
    return write


def _lines(size: int, line) -> bytes:
    out, n = [], 0
    while n < size:
        out.append(line())
        n += len(out[-1])
    return "".join(out).encode()[:size]


# ---------------------------------------------------------------- cc1

def c_source(path: str, scale: float) -> None:
    """Functions of four kinds, interleaved (f0 loops, f1 list walk, ...)."""
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


def c_source_blocks(path: str, scale: float) -> None:
    """Other constructs, grouped: a block of floating-point kernels, then
    large switch-based state machines, then struct-heavy code with inlined
    helpers, then nested loops over 2-d arrays; block sizes differ."""
    rng = random.Random(21)
    blocks = (("float", 0.3), ("switch", 0.2), ("struct", 0.3), ("nest", 0.2))
    total = max(int(300 * scale), 8)
    with open(path, "w") as f:
        f.write("#define N 64\nstruct rec { int a, b; double x, y; struct rec *l, *r; char name[16]; };\n"
                "static inline int clamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }\n"
                "static inline double mix(double a, double b, double t) { return a + (b - a) * t; }\n")
        k = 0
        for kind, share in blocks:
            for _ in range(max(int(total * share), 1)):
                k += 1
                if kind == "float":
                    f.write(f"double g{k}(const double *x, double *y, int n) {{\n  double acc = 0;\n")
                    for j in range(rng.randint(3, 8)):
                        f.write(f"  for (int i = 1; i < n; i++) {{ y[i] = mix(x[i], y[i-1], {rng.random():.3f})"
                                f" * {rng.random():.3f} + x[i-1] / (1.0 + x[i] * x[i]); acc += y[i]; }}\n")
                    f.write("  return acc;\n}\n")
                elif kind == "switch":
                    f.write(f"int g{k}(const char *s) {{\n  int st = 0, out = 0;\n  for (; *s; s++) {{\n"
                            "    switch (st * 8 + (*s & 7)) {\n")
                    for c in range(rng.randint(20, 48)):
                        f.write(f"    case {c}: st = {rng.randint(0, 5)}; out += {rng.randint(-9, 9)}; break;\n")
                    f.write("    default: st = 0; }\n  }\n  return out;\n}\n")
                elif kind == "struct":
                    f.write(f"int g{k}(struct rec *r, int depth) {{\n  int s = 0;\n  if (!r || depth > 9) return 0;\n")
                    for j in range(rng.randint(3, 7)):
                        f.write(f"  s += clamp(r->a * {j + 1} - r->b, {-j}, {j * 10 + 5});\n"
                                f"  if (r->name[{j % 16}] == '{chr(97 + j)}') s += g{k}(r->{'lr'[j % 2]}, depth + 1);\n"
                                f"  r->x = mix(r->x, r->y, 0.{j + 1});\n")
                    f.write("  return s;\n}\n")
                else:
                    f.write(f"void g{k}(int m[N][N], int t[N][N]) {{\n")
                    for j in range(rng.randint(2, 5)):
                        f.write(f"  for (int i = 1; i < N - 1; i++) for (int j = 1; j < N - 1; j++)\n"
                                f"    t[i][j] = (m[i-1][j] + m[i+1][j] + m[i][j-1] * {j + 2} + m[i][j+1]) >> {j % 3 + 1};\n"
                                f"  for (int i = 0; i < N; i++) for (int j = 0; j < N; j++) m[j][i] ^= t[i][j];\n")
                    f.write("}\n")


# ---------------------------------------------------------------- perl

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

PERL_OTHER = r"""
use strict; use warnings;
my $scale = %(scale)s;
srand(22);
# part 1: a sieve and integer arithmetic
my $L = int(300000 * $scale) || 100;
my @sieve = (1) x $L; my $primes = 0;
for my $p (2 .. $L - 1) { next unless $sieve[$p]; $primes++;
    for (my $q = $p * $p; $q < $L; $q += $p) { $sieve[$q] = 0 } }
# part 2: build strings with sprintf, sort them, pack and unpack records
my @recs;
for my $i (1 .. int(150000 * $scale)) {
    push @recs, sprintf("%%08x:%%s:%%.3f", int(rand(2**31)), join("", map { chr(97 + int rand 26) } 1 .. 6), rand);
}
my @sorted = sort { (split /:/, $a)[1] cmp (split /:/, $b)[1] } @recs;
my $bin = join "", map { pack("NnA6d", hex(substr($_, 0, 8)), length $_, substr($_, 9, 6), 1.5) } @sorted;
my $sum = 0;
for (my $o = 0; $o < length $bin; $o += 20) { my ($a, $b) = unpack("Nn", substr($bin, $o, 6)); $sum += $a %% 1000 + $b; }
# part 3: recursion and a memoised hash of arrays
my %%memo;
sub walk { my ($n, $d) = @_; return 1 if $n < 2 || $d > 40;
    return $memo{"$n/$d"} //= walk($n - 1, $d + 1) + walk(int($n / 2), $d + 1) + ($n %% 7); }
my $t = 0;
for my $i (1 .. int(4000 * $scale)) { %%memo = () if $i %% 50 == 0; $t += walk(200 + $i %% 300, 0); }
# part 4: the sieve's numbers through a regex tokenizer again, then a hash join
my %%idx; my $j = 0;
for my $i (1 .. int(40000 * $scale)) {
    my $line = "k$i=" . ($i * 7919 %% 10007) . ";v=" . ($i %% 97) . ";w=" . ($i %% 13);
    my %%kv = $line =~ /(\w+)=(\d+)/g;
    push @{$idx{$kv{v}}}, $kv{w};
}
$j += scalar @{$idx{$_}} for keys %%idx;
print "$primes $sum $t $j\n";
"""


def perl_script(template: str):
    def write(path: str, scale: float) -> None:
        with open(path, "w") as f:
            f.write(template % {"scale": scale})
    return write


# ---------------------------------------------------------------- sqlite3

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

SQL_OTHER = """
CREATE TABLE doc(id INTEGER PRIMARY KEY, grp INTEGER, body TEXT, n REAL);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < %(rows)d)
INSERT INTO doc SELECT i, i %% 37, hex(randomblob(24 + i %% 40)), abs(random() %% 100000) / 100.0 FROM c;
SELECT grp, sum(n) OVER (PARTITION BY grp ORDER BY id ROWS 20 PRECEDING) AS w
  FROM doc ORDER BY w DESC LIMIT 5;
UPDATE doc SET body = upper(substr(body, 5) || substr(body, 1, 4)) WHERE id %% 3 = 0;
WITH RECURSIVE fib(i, a, b) AS (SELECT 0, 0, 1 UNION ALL
  SELECT i + 1, b %% 1000003, (a + b) %% 1000003 FROM fib WHERE i < %(fib)d)
SELECT max(a) FROM fib;
CREATE INDEX doc_body ON doc(body);
SELECT count(*) FROM doc WHERE body > 'A' AND body < 'C';
DELETE FROM doc WHERE grp %% 5 = 1;
SELECT grp, group_concat(substr(body, 1, 3), ',') FROM doc GROUP BY grp ORDER BY length(group_concat(body)) LIMIT 2;
"""


def sql_script(template: str):
    def write(path: str, scale: float) -> None:
        with open(path, "w") as f:
            f.write(template % {"rows": int(200_000 * scale), "join": int(40_000 * scale),
                                "fib": int(3_000_000 * scale)})
    return write


# ---------------------------------------------------------------- node

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

NODE_OTHER = """'use strict';
// part 1: JSON text built, stringified and parsed back
let total = 0;
for (let i = 0; i < %(json)d; i++) {
  const o = { id: i, name: 'n' + (i %% 977), vals: [i %% 7, i %% 11, i %% 13], nested: { f: i / 3 } };
  const back = JSON.parse(JSON.stringify(o));
  total += back.vals[1] + back.name.length;
}
// part 2: a typed-array stencil (integer and float)
const n = 1 << 16;
const a = new Float64Array(n), b = new Float64Array(n), c = new Int32Array(n);
for (let i = 0; i < n; i++) { a[i] = (i * 13) %% 101; c[i] = i * 2654435761 | 0; }
for (let r = 0; r < %(rounds)d; r++) {
  for (let i = 1; i < n - 1; i++) b[i] = 0.25 * (a[i - 1] + 2 * a[i] + a[i + 1]);
  for (let i = 1; i < n - 1; i++) { a[i] = b[i]; c[i] ^= (c[i - 1] >>> 3) + r; }
}
// part 3: classes with polymorphic calls
class Shape { area() { return 0; } }
class Sq extends Shape { constructor(s) { super(); this.s = s; } area() { return this.s * this.s; } }
class Ci extends Shape { constructor(r) { super(); this.r = r; } area() { return 3.14159 * this.r * this.r; } }
class Tr extends Shape { constructor(a, h) { super(); this.a = a; this.h = h; } area() { return this.a * this.h / 2; } }
let area = 0;
for (let i = 0; i < %(shapes)d; i++) {
  const s = i %% 3 === 0 ? new Sq(i %% 10) : i %% 3 === 1 ? new Ci(i %% 7) : new Tr(i %% 5, i %% 9);
  area += s.area();
}
console.log(total, a[5].toFixed(3), c[9], area.toFixed(1));
"""


def node_script(template: str, **sizes: int):
    def write(path: str, scale: float) -> None:
        with open(path, "w") as f:
            f.write(template % {k: int(v * scale) for k, v in sizes.items()})
    return write


# ---------------------------------------------------------------- python3

PY_PARTS = '''
import json, re, random
scale = %(scale)s
rng = random.Random(31)
# part 1: dictionaries and string methods
words = ["phase", "voltage", "interval", "kernel", "sample", "cluster", "program"]
counts = {}
for i in range(int(200000 * scale)):
    line = " ".join(rng.choice(words) + str(i %% 50) for _ in range(6))
    for w in line.split():
        counts[w] = counts.get(w, 0) + 1
# part 2: integer arithmetic in a loop
acc = 0
for i in range(int(3000000 * scale)):
    acc = (acc * 31 + i ^ (i >> 3)) %% 1000000007
# part 3: JSON encode and decode
blob = [{"id": i, "tags": [words[i %% 7]] * (i %% 4), "x": i / 7} for i in range(2000)]
for _ in range(int(60 * scale)):
    blob = json.loads(json.dumps(blob))
# part 4: sorting tuples and a regular-expression scan
rows = sorted((rng.random(), rng.choice(words), i) for i in range(int(300000 * scale)))
text = "\\n".join("%%s=%%d;%%s" %% (w, i, w[::-1]) for _, w, i in rows[:100000])
found = sum(1 for _ in re.finditer(r"(\\w+)=(\\d+);(\\w+)", text))
print(len(counts), acc, len(blob), found)
'''

PY_SERVER = '''
import json, random, hashlib, zlib
rng = random.Random(%(seed)d)
# A request loop: bursts of one kind of request, of irregular length (a few
# to a few hundred milliseconds of work), the kinds recurring in random order.
store = {}
kinds = %(kinds)r
def get(i):
    return store.get("k%%d" %% (i %% 50000), 0)
def put(i):
    store["k%%d" %% (i %% 50000)] = i
def parse(i):
    return len(json.loads('{"a": [%%d, 2, 3], "b": {"c": "x%%d"}}' %% (i, i))["a"])
def render(i):
    return len("<tr><td>%%d</td><td>%%s</td><td>%%.2f</td></tr>" %% (i, "name%%d" %% i, i / 3.0))
def digest(i):
    return hashlib.sha256(b"payload" * 40 + i.to_bytes(8, "little")).digest()[0]
def squeeze(i):
    return len(zlib.compress(bytes(range(256)) * 8 + i.to_bytes(8, "little"), 6))
def crunch(i):
    s = 0
    for j in range(60):
        s += (i * j) %% 7
    return s
handlers = {"get": get, "put": put, "parse": parse, "render": render, "digest": digest,
            "squeeze": squeeze, "crunch": crunch}
done, out, i = 0, 0, 0
while done < %(requests)d:
    kind = rng.choice(kinds)
    burst = int(rng.lognormvariate(%(mu)s, 1.0)) + 1
    h = handlers[kind]
    for _ in range(burst):
        out += h(i) or 0
        i += 1
    done += burst
print(done, out)
'''


def python_parts(path: str, scale: float) -> None:
    with open(path, "w") as f:
        f.write(PY_PARTS % {"scale": scale})


def python_server(path: str, scale: float) -> None:
    with open(path, "w") as f:
        f.write(PY_SERVER % {"seed": 32, "requests": int(1_500_000 * scale), "mu": 9.5,
                             "kinds": ["get", "put", "parse", "render", "digest", "squeeze",
                                       "crunch", "get", "parse"]})


# ---------------------------------------------------------------- grep

def grep_logs(path: str, scale: float) -> None:
    """Log lines, then CSV, then random bytes as text, then long lines."""
    rng = random.Random(41)
    size = int(8 << 20) * scale
    with open(path, "wb") as f:
        f.write(_lines(int(size * 0.35), lambda: "2026-%02d-%02d %s [%s] req=%d user=%s%d path=/%s/%s %dms\n" % (
            rng.randint(1, 12), rng.randint(1, 28), rng.choice(["INFO", "WARN", "ERROR", "DEBUG"]),
            rng.choice(_WORDS), rng.randint(0, 10**6), rng.choice(_WORDS), rng.randint(0, 99),
            rng.choice(_WORDS), rng.choice(_WORDS), rng.randint(0, 5000))))
        f.write(_csv(rng, int(size * 0.25)))
        f.write(_lines(int(size * 0.15), lambda: rng.randbytes(rng.randint(10, 200)).hex() + "\n"))
        f.write(_lines(int(size * 0.25), lambda: " ".join(
            rng.choice(_WORDS) for _ in range(rng.randint(200, 2000))) + "\n"))


def grep_source(path: str, scale: float) -> None:
    """Source-like text, then JSON lines, then DNA in 80-column lines, then
    sparse binary-ish lines; other order and sizes."""
    rng = random.Random(42)
    size = int(8 << 20) * scale
    with open(path, "wb") as f:
        f.write(_source(rng, int(size * 0.3)))
        f.write(_json(rng, int(size * 0.3)))
        f.write(_lines(int(size * 0.25), lambda: "".join(rng.choice("ACGT") for _ in range(80)) + "\n"))
        f.write(_lines(int(size * 0.15), lambda: "".join(rng.choice("abc xyz 01") for _ in range(120)) + "\n"))


# ---------------------------------------------------------------- as

def asm_mixed(path: str, scale: float) -> None:
    """Integer code with labels and jumps (relaxation), SSE/AVX arithmetic,
    data directives, and macro expansion, in that order."""
    _asm(path, scale, 51, (("jumps", 0.35), ("vector", 0.25), ("data", 0.2), ("macro", 0.2)))


def asm_other(path: str, scale: float) -> None:
    """Macros and .rept first, then data with strings, then jumps, in other
    shares."""
    _asm(path, scale, 52, (("macro", 0.3), ("data", 0.3), ("vector", 0.1), ("jumps", 0.3)))


def _asm(path: str, scale: float, seed: int, plan) -> None:
    rng = random.Random(seed)
    lines = int(1_000_000 * scale)
    regs = ["rax", "rbx", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11"]
    with open(path, "w") as f:
        f.write(".macro STEP a, b, n\n  add \\a, \\b\n  imul $\\n, \\b, \\a\n  xor \\b, \\a\n"
                "  .rept 3\n  rol $\\n, \\a\n  .endr\n.endm\n")
        label = 0
        for kind, share in plan:
            f.write(".text\n" if kind != "data" else ".data\n")
            for _ in range(int(lines * share)):
                if kind == "jumps":
                    label += 1
                    r = rng.choice(["cmp %{0}, %{1}", "test %{0}, %{1}", "add $%d, %%{0}" % rng.randint(1, 99),
                                    "mov %d(%%{0}), %%{1}" % (8 * rng.randint(0, 20)), "lea (%{0},%{1},8), %{0}"])
                    f.write(f"L{label}: " + r.format(rng.choice(regs), rng.choice(regs)) + "\n")
                    f.write(f"  j{rng.choice(['e', 'ne', 'l', 'g', 'mp'])} L{max(1, label - rng.randint(0, 300))}\n")
                elif kind == "vector":
                    x = [rng.randint(0, 15) for _ in range(3)]
                    f.write(rng.choice([
                        f"  vaddpd %ymm{x[0]}, %ymm{x[1]}, %ymm{x[2]}\n",
                        f"  vfmadd231ps %xmm{x[0]}, %xmm{x[1]}, %xmm{x[2]}\n",
                        f"  mulsd %xmm{x[0] % 8}, %xmm{x[1] % 8}\n",
                        f"  vpshufb %ymm{x[0]}, %ymm{x[1]}, %ymm{x[2]}\n",
                        f"  movaps {16 * x[0]}(%rsp), %xmm{x[1]}\n"]))
                elif kind == "data":
                    f.write(rng.choice([
                        f"  .quad {rng.randint(0, 2**62)}, {rng.randint(0, 2**62)}\n",
                        f"  .byte {', '.join(str(rng.randint(0, 255)) for _ in range(8))}\n",
                        f'  .ascii "{"".join(rng.choice("abcdefgh ") for _ in range(24))}"\n',
                        f"  .long {rng.randint(0, 2**31)}\n", f"  .uleb128 {rng.randint(0, 2**40)}\n"]))
                else:
                    f.write(f"  STEP %{rng.choice(regs)}, %{rng.choice(regs)}, {rng.randint(1, 31)}\n")


# ---------------------------------------------------------------- kvloop (C)

KVLOOP_C = r"""
/* A request loop: reads a schedule of bursts (kind, count) and serves each
 * request with the kind's handler, as a server alternating request kinds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#define TABLE (1u << 22)
static uint64_t keys[TABLE]; static uint32_t vals[TABLE];
static uint64_t h64(uint64_t x) { x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 29; return x; }
static uint32_t get(uint64_t k) { uint32_t i = h64(k) & (TABLE - 1);
  while (keys[i] && keys[i] != k) i = (i + 1) & (TABLE - 1); return vals[i]; }
static void put(uint64_t k, uint32_t v) { uint32_t i = h64(k) & (TABLE - 1);
  while (keys[i] && keys[i] != k) i = (i + 1) & (TABLE - 1); keys[i] = k; vals[i] = v; }
static int cmp(const void *a, const void *b) { uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b; return (x > y) - (x < y); }
static uint64_t serve(int kind, uint64_t i) {
  char buf[256]; uint32_t arr[64]; uint64_t s = 0;
  switch (kind) {
  case 0: for (int j = 0; j < 128; j++) s += get(h64(i * 128 + j) %% (TABLE / 2) + 1); return s;
  case 1: for (int j = 0; j < 128; j++) put(h64(i * 128 + j) %% (TABLE / 2) + 1, (uint32_t)i); return 1;
  case 2: for (int j = 0; j < 3; j++) { int n = snprintf(buf, sizeof buf, "id=%%llu;name=user%%llu;score=%%.3f",
            (unsigned long long)(i + j), (unsigned long long)(i %% 977), (double)i / 7.0);
            char *p = strstr(buf, "score="); s += n + (p ? (uint64_t)strtod(p + 6, NULL) : 0); } return s;
  case 3: for (int j = 0; j < 32; j++) arr[j] = (uint32_t)h64(i * 32 + j);
          qsort(arr, 32, sizeof arr[0], cmp); return arr[16];
  case 4: { uint32_t c = ~0u; for (int j = 0; j < 128; j++) { c ^= (uint32_t)(i + j);
            for (int b = 0; b < 8; b++) c = (c >> 1) ^ (0xedb88320u & -(c & 1)); } return c; }
  default: { double x = (double)(i %% 1000), y = 0; for (int j = 0; j < 600; j++) y += x / (1.0 + j * x) * (j & 1 ? -1 : 1); return (uint64_t)(y * 1000); }
  }
}
int main(int argc, char **argv) {
  FILE *f = fopen(argv[1], "r"); if (!f) return 1;
  int kind; long count; uint64_t i = 0, out = 0;
  for (uint64_t k = 1; k <= TABLE / 2; k += 3) put(k, (uint32_t)k);
  while (fscanf(f, "%%d %%ld", &kind, &count) == 2)
    for (long n = 0; n < count; n++) out += serve(kind, i++);
  printf("%%llu\n", (unsigned long long)out);
  return 0;
}
"""


def kvloop(seed: int, weights: tuple[float, ...], mean_burst: float, bursts: int):
    """A writer of the schedule (bursts of irregular, log-normal length) and
    of the program itself, built into the same directory."""
    def write(path: str, scale: float) -> None:
        d = os.path.dirname(path)
        src, exe = os.path.join(d, "kvloop.c"), os.path.join(d, "kvloop")
        with open(src, "w") as f:
            f.write(KVLOOP_C.replace("%%", "%"))
        subprocess.run(["gcc", "-O2", "-g", "-o", exe, src], check=True)
        rng = random.Random(seed)
        with open(path, "w") as f:
            for _ in range(max(int(bursts * scale), 2)):
                kind = rng.choices(range(len(weights)), weights)[0]
                f.write(f"{kind} {int(rng.lognormvariate(0, 1.0) * mean_burst) + 1}\n")
    return write


def closefns(path: str, scale: float) -> None:
    """Builds the program itself (the workload's "input")."""
    out = os.path.dirname(path)
    subprocess.run(["make", "-s", "-C", TEST_WORKLOADS, f"OUT={out}", "CC=gcc",
                    os.path.join(out, "closefns")], check=True)
    os.replace(os.path.join(out, "closefns"), path)


# ---------------------------------------------------------------- the table

_GREP_LOGS = r"\b(\w+)\b.*\b\1\b"
_GREP_SRC = r"([a-z]{3})[a-z_]*\b.*\1"

# ---------------------------------------------------------------- the unseen half
# Written after every setting was chosen, and scored once: sort, awk, bc.

def sort_lines(kind: str, seed: int):
    """Lines for sort: CSV records with a text key (``csv``), or words, numbers
    and long lines mixed (``mixed``)."""
    def write(path: str, scale: float) -> None:
        rng = random.Random(seed)
        n = int(1_500_000 * scale)
        with open(path, "w") as f:
            for i in range(n):
                if kind == "csv":
                    f.write(f"{rng.randrange(10**6)},{rng.choice(_WORDS)}{i % 977},"
                            f"{''.join(rng.choice('ACGT') for _ in range(12))},{rng.random():.6f}\n")
                elif i % 3 == 0:
                    f.write(f"{rng.uniform(-1e6, 1e6):.3f}\n")
                elif i % 3 == 1:
                    f.write(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 20))) + "\n")
                else:
                    f.write(f"{rng.randrange(10**9):x}-{rng.choice(_WORDS)}\n")
    return write


AWK_FIELDS = """BEGIN {
    srand(5); n = int(%(n)d)
    # part 1: build records, split them into fields, count in an associative array
    for (i = 0; i < n; i++) {
        line = sprintf("%%d,k%%d,%%s,%%.3f", i, (i * 7919) %% 10007, substr("abcdefghij", 1 + i %% 10), rand())
        split(line, f, ",")
        count[f[2]] += f[4]
    }
    # part 2: floating-point arithmetic
    acc = 0
    for (i = 1; i < n * 6; i++) acc += sqrt(i) * ((i %% 8) - 3.5) / i
    # part 3: string functions
    s = ""
    for (i = 0; i < n / 4; i++) {
        t = sprintf("word%%d and word%%d", i, i * 3)
        gsub(/word/, "w", t)
        s = s substr(t, 1, 2)
        if (length(s) > 1000) s = ""
    }
    print length(count), acc, length(s)
}
"""

AWK_OTHER = """BEGIN {
    srand(9); n = int(%(n)d)
    # part 1: string building and matching
    hits = 0
    for (i = 0; i < n; i++) {
        t = sprintf("GET /item/%%d?user=%%d HTTP/1.1 %%d", i %% 5003, i %% 71, 200 + i %% 3)
        if (match(t, /user=[0-9]+/)) hits += RLENGTH
        u = toupper(substr(t, 5, 9))
    }
    # part 2: an insertion sort on short arrays
    for (r = 0; r < n / 200; r++) {
        for (j = 1; j <= 60; j++) a[j] = (r * j * 2654435761) %% 1000
        for (j = 2; j <= 60; j++) { v = a[j]; k = j - 1
            while (k > 0 && a[k] > v) { a[k + 1] = a[k]; k-- }
            a[k + 1] = v }
    }
    # part 3: integer arithmetic with modulo
    x = 1
    for (i = 0; i < n * 4; i++) x = (x * 31 + i) %% 1000003
    print hits, a[1], x
}
"""


def awk_program(template: str):
    def write(path: str, scale: float) -> None:
        with open(path, "w") as f:
            f.write(template % {"n": int(400_000 * scale)})
    return write


BC_SERIES = """scale = %(digits)d
/* part 1: arctangent series for pi, at many digits */
p = 16 * a(1/5) - 4 * a(1/239)
/* part 2: integer factorials and their digit sums */
scale = 0
t = 0
for (i = 1; i <= %(facts)d; i++) { f = 1; for (j = 2; j <= i; j++) f *= j; t += f %% 1000007 }
/* part 3: square roots at many digits */
scale = %(digits)d
s = 0
for (i = 2; i <= %(roots)d; i++) s += sqrt(i)
t
quit
"""

BC_OTHER = """/* part 1: integer powers modulo a prime */
scale = 0
r = 0
for (i = 1; i <= %(pows)d; i++) r = (r + (i ^ 40) %% 1000003) %% 1000003
/* part 2: exponentials and logarithms at many digits */
scale = %(digits)d
e = 0
for (i = 1; i <= %(exps)d; i++) e += l(i) * e(1 / i)
/* part 3: long division */
d = 0
for (i = 1; i <= %(divs)d; i++) d += 1 / (i * 7 + 3)
r
quit
"""


def bc_script(template: str, **sizes: int):
    def write(path: str, scale: float) -> None:
        with open(path, "w") as f:
            f.write(template % {k: max(int(v * scale), 2) if k != "digits" else v
                                for k, v in sizes.items()})
    return write


WORKLOADS = (
    # ---- tuning half
    Workload("bzip2-mixed", "bzip2", "bzip2 -9 -c on 6 sections: text, random bytes, CSV, long runs, "
             "DNA-like, binary records", ("bzip2", "-9", "-c", "{input}"),
             mixed_file(PLAN_MIXED, 10), scale=3.0, package="bzip2"),
    Workload("bzip2-skew", "bzip2", "bzip2 -9 -c on 8 sections of other kinds and sizes: DNA-like, "
             "JSON lines, random, C-like source, runs, sparse, text, CSV",
             ("bzip2", "-9", "-c", "{input}"), mixed_file(PLAN_SKEW, 20), scale=3.5, package="bzip2"),
    Workload("xz-T2-mixed", "xz-T2", "xz -T2 -6 on the six-section file (two compressing threads)",
             ("xz", "-T2", "-6", "--block-size=1MiB", "-c", "{input}"), mixed_file(PLAN_MIXED, 10),
             threads=2, scale=2.0, package="xz-utils"),
    Workload("xz-T2-skew", "xz-T2", "xz -T2 -6 on 8 sections: records, source, random, sparse, JSON, "
             "DNA, runs, text", ("xz", "-T2", "-6", "--block-size=1MiB", "-c", "{input}"),
             mixed_file(PLAN_SKEW_XZ, 30), threads=2, scale=1.2, package="xz-utils"),
    Workload("perl-text-numeric", "perl", "perl: regex and hash text processing, then Mandelbrot, "
             "matrix multiply and a sieve", ("perl", "{input}"), perl_script(PERL), package="perl"),
    Workload("perl-sort-recurse", "perl", "perl: a sieve, sprintf/sort/pack records, memoised recursion, "
             "a regex tokenizer into a hash of arrays", ("perl", "{input}"), perl_script(PERL_OTHER),
             scale=0.6, package="perl"),
    Workload("sqlite3-rows-join", "sqlite3", "sqlite3 in memory: insert 200,000 rows, build an index, "
             "group, scan strings with LIKE, join on the index",
             ("sqlite3", ":memory:", ".read {input}"), sql_script(SQL), package="sqlite3"),
    Workload("sqlite3-blobs-window", "sqlite3", "sqlite3 in memory: random blobs as hex, a window "
             "function, string UPDATE, a recursive CTE, a text index and range, DELETE, group_concat",
             ("sqlite3", ":memory:", ".read {input}"), sql_script(SQL_OTHER), scale=0.35, package="sqlite3"),
    Workload("as-jumps-first", "as", "GNU as on generated assembly: jumps and labels, SSE/AVX, data "
             "directives, macro expansions", ("as", "-o", "{out}", "{input}"), asm_mixed,
             scale=0.35, package="binutils"),
    Workload("as-macros-first", "as", "GNU as: macros first, then data with strings, AVX, jumps, in "
             "other shares", ("as", "-o", "{out}", "{input}"), asm_other, scale=0.3, package="binutils"),
    Workload("kvloop-six", "kvloop", "a C request loop (built here): bursts of six request kinds "
             "(hash get, put, format/parse, sort, CRC, float), log-normal burst lengths",
             ("{dir}/kvloop", "{input}"), kvloop(61, (1, 1, 1, 1, 1, 1), 30_000, 20),
             package="gcc"),
    Workload("kvloop-skewed", "kvloop", "the C request loop on another schedule: mostly gets and "
             "format/parse, rare long CRC and sort bursts, shorter bursts",
             ("{dir}/kvloop", "{input}"), kvloop(62, (5, 0.5, 3, 0.7, 0.7, 0.2), 12_000, 50),
             package="gcc"),
    Workload("closefns-100M", "closefns", "a C program: hash loop, pointer-chasing walk, hash loop "
             "again, the two functions adjacent in .text (tests/workloads/closefns.c)",
             ("{input}", "--iterations", "100000000"), closefns, package="gcc"),
    # ---- test half
    Workload("gzip-mixed", "gzip", "gzip -9 -c on the six kinds of section",
             ("gzip", "-9", "-c", "{input}"), mixed_file(PLAN_MIXED, 10), scale=1.5, package="gzip"),
    Workload("gzip-skew", "gzip", "gzip -9 -c on 8 sections of other kinds and sizes",
             ("gzip", "-9", "-c", "{input}"), mixed_file(PLAN_SKEW, 20), scale=1.0, package="gzip"),
    Workload("zstd-mixed", "zstd", "zstd -19 --single-thread on the six-section file",
             ("zstd", "-19", "--single-thread", "-c", "{input}"), mixed_file(PLAN_MIXED, 10),
             scale=0.8, package="zstd"),
    Workload("zstd-skew", "zstd", "zstd -19 --single-thread on 8 sections: JSON, random, DNA, "
             "records, source, runs, sparse, CSV", ("zstd", "-19", "--single-thread", "-c", "{input}"),
             mixed_file(PLAN_SKEW_ZSTD, 40), scale=0.6, package="zstd"),
    Workload("cc1-interleaved", "cc1", "cc1 -O2 on a generated C file of 120 functions of four "
             "kinds, interleaved", (CC1, "-quiet", "-O2", "{input}", "-o", "{out}"), c_source,
             scale=0.3, package="gcc-12"),
    Workload("cc1-blocks", "cc1", "cc1 -O2 on other constructs in blocks: float kernels, switch "
             "state machines, struct code with inlined helpers, 2-d loop nests",
             (CC1, "-quiet", "-O2", "{input}", "-o", "{out}"), c_source_blocks, scale=0.3,
             package="gcc-12"),
    Workload("python3-parts", "python3", "python3: dict and string methods, integer loop, JSON "
             "round trips, sorting and a regex scan", (PYTHON, "-S", "{input}"), python_parts,
             scale=0.35, package="python3"),
    Workload("python3-server", "python3", "python3 request loop: bursts of seven request kinds "
             "(dict get/put, JSON parse, format, sha256, zlib, arithmetic) of irregular length",
             (PYTHON, "-S", "{input}"), python_server, scale=0.25, package="python3"),
    Workload("node-three-parts", "node", "node (V8's JIT): regular expressions and a Map, then "
             "floating-point arithmetic, then objects sorted and grouped", ("node", "{input}"),
             node_script(NODE, strings=300_000, floats=30_000_000, objects=200_000), scale=1.3,
             package="nodejs"),
    Workload("node-json-typed", "node", "node: JSON round trips, a typed-array stencil, "
             "polymorphic class calls", ("node", "{input}"),
             node_script(NODE_OTHER, json=200_000, rounds=300, shapes=3_000_000), scale=0.85, package="nodejs"),
    Workload("grep-logs", "grep", "grep -E -c, a back-reference pattern (a word repeated), over log lines, CSV, "
             "hex lines and long word lines", ("grep", "-E", "-c", _GREP_LOGS, "{input}"),
             grep_logs, scale=0.2, package="grep"),
    Workload("grep-source", "grep", "grep -E -o -i, another back-reference pattern, over C-like source, JSON lines, "
             "DNA lines and short random lines", ("grep", "-E", "-o", "-i", _GREP_SRC, "{input}"),
             grep_source, scale=0.1, package="grep"),
    # ---- unseen half (written after the settings were chosen; scored once)
    Workload("sort-csv", "sort", "sort one thread on CSV records by a text field then a number",
             ("sort", "--parallel=1", "-S", "1G", "-t,", "-k3,3", "-k1,1n", "-o", "{out}", "{input}"),
             sort_lines("csv", 71), package="coreutils"),
    Workload("sort-mixed", "sort", "sort -g one thread on numbers, word lines and hex keys mixed",
             ("sort", "--parallel=1", "-S", "1G", "-g", "-o", "{out}", "{input}"),
             sort_lines("mixed", 72), scale=0.6, package="coreutils"),
    Workload("awk-fields", "awk", "mawk: records split into an associative array, float loop, "
             "gsub and sprintf", ("mawk", "-f", "{input}"), awk_program(AWK_FIELDS), scale=4.0, package="mawk"),
    Workload("awk-requests", "awk", "mawk: request lines matched, insertion sorts, integer modulo loop",
             ("mawk", "-f", "{input}"), awk_program(AWK_OTHER), scale=4.0, package="mawk"),
    Workload("bc-series", "bc", "bc -l: arctangent series for pi, factorials, square roots",
             ("bc", "-lq", "{input}"), bc_script(BC_SERIES, digits=1000, facts=400, roots=150),
             package="bc"),
    Workload("bc-exp-log", "bc", "bc -l: modular powers, exponentials and logarithms, long division",
             ("bc", "-lq", "{input}"), bc_script(BC_OTHER, pows=20000, digits=400, exps=120, divs=20000),
             scale=0.4, package="bc"),
)

BY_NAME = {w.name: w for w in WORKLOADS}


def available(w: Workload) -> str | None:
    """Why the workload cannot run here, or None."""
    exe = w.argv[0]
    if exe.startswith("{"):         # a program built here with gcc
        return None if shutil.which("gcc") and shutil.which("make") else \
            "gcc or make is missing (apt-get install gcc make)"
    ok = os.access(exe, os.X_OK) if os.path.isabs(exe) else shutil.which(exe)
    return None if ok else f"{exe} is not installed (apt-get install {w.package})"


def write_input(w: Workload, path: str, scale: float | None = None) -> None:
    w.writer(path, w.scale if scale is None else scale)
