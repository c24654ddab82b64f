"""SplitMix64's finaliser written out plainly, in Python integers: the
oracle of the code signature's hash (core/codemap.py) for the tests."""

U64 = (1 << 64) - 1


def plain_mix(x: int) -> int:
    """SplitMix64's finaliser, in Python integers."""
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & U64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & U64
    return x ^ (x >> 31)
