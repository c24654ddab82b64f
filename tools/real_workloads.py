"""Inputs for real programs with phases, generated deterministically.

- ``mixed_file``: a file of sections that take different code paths in a
  compressor: English-like text, random bytes, CSV, long runs, DNA-like
  letters, binary records.
- ``c_source``: a C file of many generated functions (loops, switches, structs,
  arithmetic) for a compiler.
- ``PERL_SCRIPT``: about 1.1 s of regex and hash text processing, then about
  0.9 s of Mandelbrot, matrix multiply and a sieve (on an idle core of this VM;
  both halves scale with ``$ARGV[0]``).  It says on stderr at what CPU time
  the second half starts.

Run as a script to write them: ``python tools/real_workloads.py DIR``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

WORDS = ("phase program interval signature voltage frequency the of and to in is that "
         "for it as was with be by on not he this are or his from at which but have an they "
         "you were her she there been one all we their has would when who will more no if out "
         "so said what up its about into than them can only other new some could time these").split()


def mixed_file(path: Path, mib: int = 30, seed: int = 7) -> Path:
    """``mib`` MiB in six kinds of section, each kind twice, in a fixed order."""
    rng = np.random.default_rng(seed)
    section = (mib << 20) // 12
    makers = (_text, _random, _csv, _runs, _dna, _records)
    with open(path, "wb") as f:
        for rep in range(2):
            for make in makers:
                f.write(make(rng, section)[:section])
    return path


def _text(rng, n):
    words = rng.choice(WORDS, size=n // 4)
    return " ".join(words).encode()


def _random(rng, n):
    return rng.integers(0, 256, n, dtype=np.uint8).tobytes()


def _csv(rng, n):
    rows = n // 40 + 1
    a = rng.integers(0, 100000, rows)
    b = rng.normal(0, 1000, rows)
    lines = [f"{i},{x},{y:.3f},item{x % 97}\n" for i, (x, y) in enumerate(zip(a, b))]
    return "".join(lines).encode()


def _runs(rng, n):
    lengths = rng.integers(200, 5000, n // 200 + 1)
    values = rng.integers(0, 4, len(lengths), dtype=np.uint8)
    return np.repeat(values, lengths)[:n].tobytes()


def _dna(rng, n):
    return np.frombuffer(b"ACGT", np.uint8)[rng.integers(0, 4, n)].tobytes()


def _records(rng, n):
    k = n // 16 + 1
    rec = np.zeros(k, dtype=[("id", "<u4"), ("t", "<u4"), ("v", "<f4"), ("flag", "<u4")])
    rec["id"] = np.arange(k)
    rec["t"] = np.cumsum(rng.integers(1, 50, k))
    rec["v"] = rng.normal(20, 3, k)
    rec["flag"] = rng.integers(0, 3, k)
    return rec.tobytes()


def c_source(path: Path, functions: int = 250, table_rows: int = 9000, seed: int = 3) -> Path:
    """About 1 MB of C: constant tables (parsed and emitted, hardly optimised),
    then functions with loops, switches and struct arithmetic (optimised)."""
    rng = np.random.default_rng(seed)
    parts = ["struct point { int x, y; double w; };\n", "static int table[256];\n"]
    for t in range(table_rows // 100):
        rows = ",\n".join("  {" + ", ".join(str(int(v)) for v in rng.integers(0, 99999, 12)) + "}"
                          for _ in range(100))
        parts.append(f"const int data{t}[100][12] = {{\n{rows}\n}};\n")
    for i in range(functions):
        a, b, c = (int(v) for v in rng.integers(1, 97, 3))
        cases = "".join(f"    case {k}: acc += {k * a} * p->x - {b}; break;\n"
                        for k in range(int(rng.integers(3, 7))))
        parts.append(
            f"int f{i}(struct point *p, int n) {{\n"
            f"  int acc = {c};\n"
            f"  for (int i = 0; i < n; i++) {{\n"
            f"    switch ((i * {a} + p->y) % 16) {{\n{cases}"
            f"    default: acc ^= table[(i + {b}) & 255];\n    }}\n"
            f"    if (acc > {a * 1000}) acc = acc / {b} + p->y;\n"
            f"    p->w = p->w * 0.5 + acc * {c}.0 / (n + 1);\n"
            f"  }}\n"
            f"  return acc + data{i % (table_rows // 100)}[{a}][{b % 12}];\n}}\n")
    Path(path).write_text("".join(parts))
    return path


PERL_SCRIPT = r"""
use strict; use warnings;
my $scale = $ARGV[0] // 1.0;
# Part 1: regex and hash text processing.
my @w = qw(alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu);
my %count; my $text = '';
for my $i (1 .. int(156000 * $scale)) {
    my $line = join(' ', map { $w[($i * $_ + $_) % @w] . ($i % 97) } 1 .. 8);
    $line =~ s/(\w+?)(\d+)/$2$1/g;
    for my $tok (split /\s+/, $line) {
        $count{$tok}++ if $tok =~ /^\d+[a-m]/;
        $count{lc $tok} += length($tok) if $tok =~ /(?:eta|mu)$/;
    }
    $text .= $line if $i % 50 == 0;
}
my $keys = scalar keys %count;
my ($user, $sys) = times;
printf STDERR "part 2 starts at %.3f s of CPU time\n", $user + $sys;
# Part 2: Mandelbrot, matrix multiply and a sieve.
my $inside = 0;
for my $y (0 .. int(560 * $scale)) {
    for my $x (0 .. 159) {
        my ($cr, $ci, $zr, $zi, $k) = ($x / 53 - 2, $y / (280 * $scale) - 1, 0, 0, 0);
        while ($k < 60 && $zr * $zr + $zi * $zi < 4) {
            ($zr, $zi) = ($zr * $zr - $zi * $zi + $cr, 2 * $zr * $zi + $ci); $k++;
        }
        $inside++ if $k == 60;
    }
}
my $n = int(64 * $scale ** (1/3));
my @a = map { [map { ($_ * 7 + 3) % 11 } 1 .. $n] } 1 .. $n;
my @c;
for my $i (0 .. $n - 1) { for my $j (0 .. $n - 1) {
    my $s = 0; $s += $a[$i][$_] * $a[$_][$j] for 0 .. $n - 1; $c[$i][$j] = $s; } }
my $m = int(2500000 * $scale); my @sieve = (1) x ($m + 1); my $primes = 0;
for my $i (2 .. $m) { next unless $sieve[$i]; $primes++;
    for (my $j = $i * $i; $j <= $m; $j += $i) { $sieve[$j] = 0 } }
print "$keys $inside $c[1][1] $primes\n";
"""


def perl_script(path: Path) -> Path:
    Path(path).write_text(PERL_SCRIPT)
    return path


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    print(mixed_file(out / "mixed.bin"), c_source(out / "gen.c"), perl_script(out / "phases.pl"))
