"""Annotate an unedited Python program: phases, requests and marks from an annotation file.

``specnsys profile --annotate annot.toml -o OUT -- python script.py`` profiles a script that
imports nothing of specnsys. The file (:mod:`.config`, docs/annotate.md) maps functions and
methods to phases and names the calls whose values give the ``tokens``, ``proposed`` and
``accepted`` marks. :func:`environment` checks the file and returns what to add to the profiled
program's environment: a bootstrap folder first on ``PYTHONPATH`` whose ``sitecustomize``
installs the hooks (:mod:`.runtime`) in every Python interpreter the program starts.

Why ``sitecustomize`` rather than a ``python -m specnsys.inject script.py`` launcher: the
command line stays the user's own (``python -m mod``, a shell script that runs Python, a
launcher that spawns worker processes all work unchanged), and the hooks reach child Python
processes through the inherited environment. It does not reach interpreters started with
``-S``, ``-I`` or ``-E`` (which skip ``site`` or ignore ``PYTHONPATH``).

Nothing here imports torch or the analysis stack; :mod:`.runtime` imports ``specnsys.annotate``
(and so ``nvtx``) only inside the profiled program.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from specnsys.inject.config import AnnotationError, Config, load_config

__all__ = [
    "AUTO", "AUTO_ENV", "AnnotationError", "BOOTSTRAP", "CONFIG_ENV", "Config", "NONE",
    "annotation_file", "environment", "load_config",
]

BOOTSTRAP = Path(__file__).resolve().parent / "bootstrap"
CONFIG_ENV = "SPECNSYS_ANNOTATE"  # the absolute path of the annotation file
#: set when ``profile`` chose the file itself: the module the program must import for the file
#: to apply (the bootstrap waits for that import; a program without it hears nothing)
AUTO_ENV = "SPECNSYS_ANNOTATE_AUTO"
AUTO = "auto"  # --annotate default: the presets of the libraries the program imports
NONE = "none"  # --annotate none: no injection


def annotation_file(spec: str) -> Path:
    """The annotation file ``--annotate SPEC`` names: a built-in preset (``hf``) or a file.

    A bare name that is a preset's is the preset (``./hf`` names a file called ``hf``); a bare
    name that is neither a preset nor an existing file is refused in one line that lists the
    presets (exit status 2).
    """
    from specnsys.inject.presets import PRESETS

    if spec in PRESETS:
        return PRESETS[spec]
    path = Path(spec)
    if not path.exists() and os.sep not in spec and not path.suffix:
        raise AnnotationError(
            f"--annotate {spec}: no such annotation file, and no built-in preset of that name "
            f"(presets: {', '.join(PRESETS)}; {NONE} turns annotation off)"
        )
    return path


def environment(
    path: str | Path, env: Mapping[str, str] | None = None, *, auto: bool = False
) -> dict[str, str]:
    """Check the annotation file *path* and return the variables to set in the environment of
    the profiled program (*env*, default ours, gives the ``PYTHONPATH`` to extend). With
    *auto* (``profile`` chose the file), the file applies only in programs that import the
    module it ``requires``, and is silent in the others.

    Raises :class:`AnnotationError` (exit status 2) when the file cannot be used. Nothing is
    written: the program reads the file itself, so there is nothing to clean up afterwards.
    """
    config = load_config(path)
    existing = (os.environ if env is None else env).get("PYTHONPATH")
    python_path = str(BOOTSTRAP) + (os.pathsep + existing if existing else "")
    out = {CONFIG_ENV: str(config.path.resolve()), "PYTHONPATH": python_path}
    if auto and config.requires:
        out[AUTO_ENV] = config.requires
    return out
