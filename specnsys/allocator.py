"""Polars's allocator told to hand freed memory back promptly, before Polars loads.

Polars allocates with its own jemalloc (symbols prefixed ``_rjem_``), which reads its options
from ``_RJEM_MALLOC_CONF`` once, at its first allocation; no API changes them later. Polars's
``__init__`` sets ``dirty_decay_ms:500,muzzy_decay_ms:1000`` there and appends what the variable
held before, so options set before the import win. An analysis builds and drops frames of
millions of rows step after step; with Polars's settings their pages stay resident for a
second or more (a "muzzy" page is only marked free, and counts in RSS until the kernel needs
it), so the peak of a cold analysis comes near the sum of its steps instead of the largest one
(docs/performance.md#memory-of-an-analysis). A base module: the command line calls it before
it imports anything that loads Polars.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

POLARS_ALLOCATOR_VARIABLE = "_RJEM_MALLOC_CONF"
#: Freed pages go back to the system after 100 ms, at once, not after 0.5 + 1 s.
POLARS_ALLOCATOR_OPTIONS = "dirty_decay_ms:100,muzzy_decay_ms:0"
#: What Polars's ``__init__`` writes into the variable when it was unset. Every process that a
#: Python program which imported Polars starts inherits it (a bench, a test, a notebook): it
#: is Polars's default, not the user's choice.
POLARS_OWN_OPTIONS = "dirty_decay_ms:500,muzzy_decay_ms:1000"

#: The variable as this process was given it, read before Polars loaded (empty: not read).
_GIVEN: list[str | None] = []


def return_freed_memory() -> None:
    """Set :data:`POLARS_ALLOCATOR_OPTIONS` for this process and the workers it starts, unless
    the user set the variable (to anything but Polars's own default) or Polars is already
    loaded (its allocator may have read it). Either way the given value is kept for
    :func:`without_allocator_options`: Polars's import rewrites the variable too."""
    if "polars" in sys.modules:
        return
    given = os.environ.get(POLARS_ALLOCATOR_VARIABLE)
    _GIVEN[:] = [given]
    if given in (None, "", POLARS_OWN_OPTIONS):
        os.environ[POLARS_ALLOCATOR_VARIABLE] = POLARS_ALLOCATOR_OPTIONS


def without_allocator_options(env: Mapping[str, str]) -> dict[str, str]:
    """*env* with the variable as this process was given it, where *env* holds this process's
    own value (a caller's deliberate other value stays): a program that specnsys runs
    (``profile``) gets the environment it was given, neither these options nor what Polars's
    import wrote (it prepends its defaults to the variable)."""
    result = dict(env)
    if _GIVEN and result.get(POLARS_ALLOCATOR_VARIABLE) == os.environ.get(POLARS_ALLOCATOR_VARIABLE):
        given = _GIVEN[0]
        if given is None:
            result.pop(POLARS_ALLOCATOR_VARIABLE, None)
        else:
            result[POLARS_ALLOCATOR_VARIABLE] = given
    return result
