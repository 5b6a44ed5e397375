"""Start the annotation injection in a Python program that does not know about specnsys.

Imported by :mod:`site` at interpreter start-up because ``specnsys profile --annotate`` puts
this folder first on ``PYTHONPATH`` and names the annotation file in ``SPECNSYS_ANNOTATE``.
It loads the specnsys this folder belongs to (whatever else the program's ``sys.path`` holds;
the package's folder is on the path only for that import), installs the hooks, then runs the
``sitecustomize`` the program would have run without us, so an existing one still works.
Nothing here may raise into the program: a failure is one warning line.

When ``profile`` chose the file itself (``SPECNSYS_ANNOTATE_AUTO`` names the library it is for,
``transformers``), nothing of specnsys is loaded until the program imports that library: a
program that never does runs exactly as without us, and silently.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))  # holds the specnsys package


def _start() -> None:
    added = _ROOT not in sys.path
    if added:
        sys.path.insert(0, _ROOT)
    try:
        from specnsys.inject.runtime import install_from_env

        install_from_env()
    except Exception as exc:  # an unusable specnsys or nvtx: the program runs unannotated
        sys.stderr.write(f"specnsys: warning: annotations not applied: {exc}\n")
    finally:
        if added and _ROOT in sys.path:
            sys.path.remove(_ROOT)


class _WhenImported:
    """A ``sys.meta_path`` entry that finds nothing: the first time the library is looked up
    it starts the injection, before the library's code runs. It stays in the list, inert
    (removing an entry while the import system walks the list would skip the next one)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.started = False

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname == self.name and not self.started:
            self.started = True
            _start()


def _chain() -> None:
    """Run the next ``sitecustomize`` on the path, as Python would have without this one."""
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module  # what `import sitecustomize` gives from now on
    spec.loader.exec_module(module)


# The folder has done its job once this module is imported: the program's path is its own again.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
_auto = os.environ.get("SPECNSYS_ANNOTATE_AUTO")
if _auto and _auto not in sys.modules:
    sys.meta_path.insert(0, _WhenImported(_auto))
else:
    _start()
_chain()
