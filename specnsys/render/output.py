"""Writing result files so that a failed write changes nothing: :func:`write_files`, the one
writer of every output file, lives in :mod:`specnsys.small_files` (a base module, so the run-set
layer's dataset manifest and the CLI use the same one); the report layer's figures use it here.
"""

from __future__ import annotations

from specnsys.small_files import write_files

__all__ = ["write_files"]
