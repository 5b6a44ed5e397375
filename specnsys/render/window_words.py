"""The words every output uses for the window rule (``--window``) and what it dropped."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["window_rule_words"]


def window_rule_words(rule: str | None, dropped: Mapping[str, object] | None) -> str:
    """``""`` for the default window, else ``"; --window RULE: WHY (dropped A ms before, B ms
    after)"``, the phrase that follows the window's basis in every text output."""
    if not rule or rule == "requests":
        return ""
    d = dropped or {}
    parts = []
    for key, side in (("before_ns", "before"), ("after_ns", "after")):
        ns = d.get(key)
        if isinstance(ns, int | float) and ns:
            parts.append(f"{ns / 1e6:.3f} ms {side}")
    cut = f" (dropped {', '.join(parts)})" if parts else " (nothing dropped)"
    why = f": {d['why']}" if d.get("why") else ""
    return f"; --window {rule}{why}{cut}"
