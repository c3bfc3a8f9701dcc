"""Seeds derived from ``random_state`` and the number of stored trials.

A suggestion must be a pure function of the stored trials, yet two successive calls must not
repeat themselves. Mixing the user's ``random_state`` with ``len(trials)`` gives both: the same
stored trials give the same seed (and so the same suggestions after a restart), and every new
trial moves the seed on.
"""

from __future__ import annotations

import secrets

_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    # SplitMix64's finaliser: nearby inputs (random_state 0 and 1, or n and n+1) give unrelated
    # outputs, so seeding MT19937 or PCG64 from them gives unrelated streams.
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def derive_seed(random_state: int | None, *salt: int) -> int:
    """A 32-bit seed from ``random_state`` mixed with ``salt`` (e.g. the number of stored trials).

    Without a ``random_state`` the seed is fresh entropy: Katib is not deterministic either when
    the setting is absent.

    >>> derive_seed(7, 3) == derive_seed(7, 3) != derive_seed(7, 4)
    True
    """
    if random_state is None:
        return secrets.randbits(32)
    x = _splitmix64(random_state & _MASK64)
    for s in salt:
        x = _splitmix64(x ^ (s & _MASK64))
    return x & 0xFFFFFFFF
