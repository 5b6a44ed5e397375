"""Built-in annotation files for libraries a user runs unedited (``profile --annotate NAME``).

Each preset is an annotation file in this folder, written in the language of
docs/annotate.md, whose ``requires`` names the library it is for: ``hf.toml`` for Hugging Face
transformers. ``specnsys profile`` without ``--annotate`` gives every preset to the profiled
program, which applies one only when it imports the library (and is silent otherwise);
``--annotate NAME`` applies it outright, ``--annotate none`` turns injection off.

Standard library only: the profiled program reads this module.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["FOLDER", "PRESETS", "preset_name", "preset_path"]

FOLDER = Path(__file__).resolve().parent
#: preset name -> its annotation file
PRESETS: dict[str, Path] = {p.stem: p for p in sorted(FOLDER.glob("*.toml"))}


def preset_path(name: str) -> Path | None:
    """The file of the preset *name*, or None when there is no such preset."""
    return PRESETS.get(name)


def preset_name(path: str | Path) -> str | None:
    """The preset *path* is the file of, or None for a user's own file."""
    resolved = Path(path).resolve()
    return next((name for name, p in PRESETS.items() if p == resolved), None)
