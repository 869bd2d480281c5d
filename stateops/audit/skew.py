"""How uneven a store is over its partitions, and why: the numbers behind STATE_SKEW (pure, no JVM).

ratio = max / mean over every partition, empty ones included: the busiest task against an even split of
the same state. 1.0 is even; the ceiling is the partition count (everything on one partition).

Hashing is uneven by chance, very much so with few keys: K keys over P partitions leave partitions empty
when K is small, and put a few more keys on the fullest partition than on an average one. A spread that
hashing alone explains is not skew. Causes, for a remediation policy to act on:

    hot_key    one key holds most of the busiest partition and far more than an average key: no
               partition count splits a key (salt it, route it, or pre-aggregate it)
    many_keys  the busiest partition holds more keys than hashing puts on any partition by chance:
               another partition count spreads them
    few_keys   fewer keys than partitions: empty partitions are unavoidable; not skew
    hashing    as even as hashing K keys gets; not skew
    unknown    keys per partition are unknown (fast audit): judged on the ratio alone
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

# Chance that hashing alone puts more keys on some partition than hashing_max allows.
HASHING_ALPHA = 1e-3
# A hot key holds more than this share of its partition.
HOT_KEY_SHARE = 0.5
NOT_SKEW = ("few_keys", "hashing")


@dataclass(frozen=True)
class Spread:
    partitions: int
    total: int
    hot_partition: int  # the fullest partition (lowest id on ties)
    hot_value: int
    empty_partitions: int

    @property
    def ratio(self) -> float:
        """max / mean over every partition."""
        return round(self.hot_value * self.partitions / self.total, 3)

    @property
    def share(self) -> float:
        """The fullest partition's share of the store."""
        return round(self.hot_value / self.total, 4)


def spread(per_partition: Mapping[int, int | None]) -> Spread | None:
    """None when there is nothing to measure (no partitions, or all of them empty)."""
    values = {p: v or 0 for p, v in per_partition.items()}
    total = sum(values.values())
    if not values or total == 0:
        return None
    hot = max(values, key=lambda p: (values[p], -p))
    return Spread(len(values), total, hot, values[hot], sum(1 for v in values.values() if v == 0))


def hashing_max(keys: int, partitions: int, alpha: float = HASHING_ALPHA) -> int:
    """The most keys any of `partitions` partitions gets, with probability 1 - alpha, when `keys` keys
    hash uniformly: the Poisson(keys / partitions) tail with a union bound over partitions (a slight
    overestimate of the binomial truth, so it errs towards "not skew")."""
    if keys <= 0 or partitions <= 1:
        return max(keys, 0)
    lam = keys / partitions
    m = int(lam + 10 * math.sqrt(lam) + 10)  # far in the tail: P(X >= m) is negligible
    pmf = math.exp(m * math.log(lam) - lam - math.lgamma(m + 1))
    tail = 0.0
    while m > 0:
        tail += pmf  # P(X >= m)
        if partitions * tail > alpha:
            return min(m, keys)
        pmf *= m / lam  # P(X = m - 1)
        m -= 1
    return min(1, keys)


@dataclass(frozen=True)
class HotKey:
    """The heaviest key of the fullest partition, as far as the audit knows it."""

    key: Any  # None when unnamed (every key is one row, so any of them)
    share: float  # of the fullest partition
    over_mean: float | None  # its size over an average key's (None: key count unknown)


def cause_of(sp: Spread, keys: int | None, hot_partition_keys: int | None, hot_key: HotKey | None,
             hot_key_factor: float) -> tuple[str, int | None]:
    """(cause, hashing_max for `keys` keys or None). `hot_partition_keys`: keys on the fullest partition
    when known (else the fullest partition's amount is compared with `keys` keys of average size)."""
    ceiling = hashing_max(keys, sp.partitions) if keys else None
    if hot_key and hot_key.share > HOT_KEY_SHARE and (hot_key.over_mean is None
                                                         or hot_key.over_mean >= hot_key_factor):
        return "hot_key", ceiling
    if ceiling is None:
        return "unknown", None
    if hot_partition_keys is not None:
        explained = hot_partition_keys <= ceiling
    else:  # keys of average size: rows per key, or bytes per key
        explained = sp.hot_value <= ceiling * sp.total / keys
    if explained:
        return ("few_keys" if keys < sp.partitions else "hashing"), ceiling
    return ("many_keys" if hot_partition_keys is not None else "unknown"), ceiling


def effective_threshold(ratio: float, share: float, partitions: int) -> float | None:
    """The max/mean ratio at which a level starts with `partitions` partitions: `ratio`, or the ratio at
    which the fullest partition holds `share` of the store when that comes first (few partitions, where
    max/mean cannot reach `ratio`). None: the level is disabled (both 0)."""
    candidates = [x for x in (ratio, share * partitions) if x > 0]
    return round(min(candidates), 3) if candidates else None
