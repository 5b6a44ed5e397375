"""Name-mapping rules: which NVTX ranges are phases, and which phase each one is.

specnsys's own loop emits ranges named after the phase vocabulary in the ``specnsys`` domain
(docs/design.md#phases); engines with their own NVTX names (``"model_forward"``,
``"spec_decode.verify"``, ...) are mapped onto the same vocabulary by a small TOML file::

    # my_engine.toml
    name = "my-engine"
    extends = "specnsys"        # optional: keep specnsys's own ranges too

    [[rule]]
    phase = "verify"             # a phase of the vocabulary (or "request")
    name = "^spec_decode\\.verify$"  # RE2 regex searched in the range text
    domain = "^vllm$"            # optional RE2 regex searched in the domain name

    [[rule]]
    phase = "{name}"             # the range's own text becomes its phase ...
    name = "^step_"
    strip = "_[0-9]+$"           # ... less what this regex matches (optional)

    [[category]]                 # optional: kernel categories tried before the built-in
    name = "my_sampler"          # table of :mod:`.categories` (``phases --by category``)
    pattern = "^my_topk_"        # RE2 regex searched in the kernel name

Rules are tried in order; the first match names the range. Ranges no rule matches are ignored
(time inside them goes to the enclosing phase, or to ``unannotated``). ``phase = "{name}"``
takes the range's text as the phase, which is how the built-in ``nvtx`` set gives a plain
per-NVTX-range breakdown for traces without any specnsys ranges. Phase names outside the
vocabulary are refused (a typo would otherwise silently become "non-accelerable" time) unless
the file says ``custom_phases = true``.

Built-in packs map the engines' own names the same way: ``--rules vllm``, ``sglang``,
``trtllm`` and ``torch`` are TOML files of this format in :mod:`specnsys.attribution.packs`
(each names the engine files and version it follows, and what its names cannot tell), loaded
by :func:`load_rules` like a user's file; a user's file may ``extends = "vllm"``.

Only push/pop ranges become phases: they nest per thread, which the innermost-range lookup of
:mod:`.launch` relies on. A rule mapping to ``request`` may match push/pop or start/end ranges;
those set the analysis window.

The rules compile to one SQL ``CASE`` over the ``nvtx`` model table (DuckDB's RE2
``regexp_matches``), so mapping costs one vectorized pass, never a Python loop over ranges.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from specnsys.attribution.categories import KernelCategory
from specnsys.errors import BadInputError
from specnsys.small_files import read_small_text
from specnsys.vocabulary import DOMAIN, PHASES, REQUEST_PHASE

__all__ = [
    "BUILTIN_RULES",
    "NAME_PLACEHOLDER",
    "REQUEST",
    "PhaseRule",
    "PhaseRules",
    "ENGINE_PACKS",
    "builtin_rules",
    "default_rules",
    "pack_rules",
    "load_rules",
    "resolve_rules",
]

REQUEST = REQUEST_PHASE
"""The range that bounds one generation request; it sets the analysis window."""

NAME_PLACEHOLDER = "{name}"
"""A rule target meaning "the range's own text is its phase"."""

_RULE_KEYS = {"phase", "name", "domain", "strip"}
_FILE_KEYS = {"name", "extends", "custom_phases", "rule", "category"}
_CATEGORY_KEYS = {"name", "pattern"}


@dataclass(frozen=True)
class PhaseRule:
    """Map NVTX ranges whose text matches *name* and domain matches *domain* to *phase*.

    ``None`` patterns match anything (including a missing domain name). Patterns are RE2
    regular expressions searched anywhere in the string; anchor them with ``^...$``.
    """

    phase: str
    name: str | None = None
    domain: str | None = None
    strip: str | None = None
    """With ``phase = "{name}"``: a regex whose matches are removed from the text, so that
    per-call decorations (torch's ``", op_id = 314294"``) do not split one phase into many."""


@dataclass(frozen=True)
class PhaseRules:
    """An ordered rule list and the phase order the breakdown lists first."""

    name: str
    rules: tuple[PhaseRule, ...]
    phases: tuple[str, ...]
    """Declared phases in report order (named targets in rule order, vocabulary order first)."""
    source: str = "built-in"
    categories: tuple[KernelCategory, ...] = ()
    """Kernel categories tried before the built-in table (``[[category]]`` in a rules file)."""

    @property
    def takes_range_names(self) -> bool:
        """Whether some rule turns range texts into phases (so phases depend on the trace)."""
        return any(r.phase == NAME_PLACEHOLDER for r in self.rules)

    def phase_sql(self, text: str = "text", domain: str = "domain") -> str:
        """A SQL expression giving the mapped phase of an ``nvtx`` row (NULL: not a phase)."""
        arms = []
        for rule in self.rules:
            conds = [f"{text} IS NOT NULL"]
            if rule.name is not None:
                conds.append(_match_sql(text, rule.name))
            if rule.domain is not None:
                conds.append(_match_sql(f"coalesce({domain}, '')", rule.domain))
            target = _literal(rule.phase)
            if rule.phase == NAME_PLACEHOLDER:
                target = text
                if rule.strip is not None:
                    target = f"regexp_replace({text}, {_literal(rule.strip)}, '', 'g')"
            arms.append(f"WHEN {' AND '.join(conds)} THEN {target}")
        if not arms:
            return "CAST(NULL AS VARCHAR)"
        return "CASE " + " ".join(arms) + " END"


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


#: One alternative of a pattern that matches a fixed string: letters, digits, ``_`` and
#: backslash-escaped ASCII punctuation (what :func:`_re2_escape` writes), nothing else.
_PLAIN_ALTERNATIVE = re.compile(r"(?:[A-Za-z0-9_]|\\[!-/:-@\[-`{-~])+")


def _exact_strings(pattern: str) -> list[str] | None:
    """The strings an anchored pattern of literals (``^name$``, ``^(a|b|c)$``) matches, or
    None for any other pattern. RE2's ``$`` (without the multi-line flag) matches only at the
    end of the text, so such a pattern matches exactly these strings."""
    if len(pattern) < 3 or pattern[0] != "^" or pattern[-1] != "$":
        return None
    body = pattern[1:-1]
    grouped = body.startswith("(") and body.endswith(")")
    alternatives = (body[1:-1] if grouped else body).split("|")
    if len(alternatives) > 1 and not grouped:
        return None  # "^a|b$" is "^a" or "b$", not "a" or "b"
    if not all(_PLAIN_ALTERNATIVE.fullmatch(a) for a in alternatives):
        return None  # also refuses an escaped "$" or "|" split apart: a backslash must pair
    return [re.sub(r"\\(.)", r"\1", a) for a in alternatives]


def _match_sql(column: str, pattern: str) -> str:
    """SQL testing *column* against the RE2 *pattern*: ``IN`` (a third of the cost on a
    million ranges) when the pattern only matches fixed strings, as the default rules' do."""
    exact = _exact_strings(pattern)
    if exact is None:
        return f"regexp_matches({column}, {_literal(pattern)})"
    return f"{column} IN ({', '.join(_literal(v) for v in exact)})"


def default_rules(phases: Sequence[str] = PHASES, domain: str = DOMAIN) -> PhaseRules:
    """specnsys's own convention: ranges of *domain* named after a phase (or ``request``)."""
    names = list(dict.fromkeys([*phases, REQUEST]))
    alternation = "|".join(_re2_escape(p) for p in names)
    rule = PhaseRule(NAME_PLACEHOLDER, f"^({alternation})$", f"^{_re2_escape(domain)}$")
    # ``request`` bounds the window; it is never a phase row of the breakdown
    return PhaseRules("specnsys", (rule,), tuple(p for p in phases if p != REQUEST))


def _re2_escape(value: str) -> str:
    return "".join("\\" + ch if not (ch.isalnum() or ch == "_") else ch for ch in value)


TORCH_OP_DECORATION = r",\s*(seq|op_id)\s*=\s*\d+"
"""What ``torch.autograd.profiler.emit_nvtx`` appends to each op's range name."""


def _nvtx_rules() -> PhaseRules:
    """Every push/pop range is a phase named by its text (less torch's per-call ids)."""
    return PhaseRules("nvtx", (PhaseRule(NAME_PLACEHOLDER, strip=TORCH_OP_DECORATION),), ())


PACKS_DIR = Path(__file__).resolve().parent / "packs"
"""Where the engine rule packs live: one TOML rules file per engine, shipped as package data."""

ENGINE_PACKS = ("vllm", "sglang", "trtllm", "torch")
"""The built-in packs mapping an inference engine's own NVTX names onto the phases; each file
names, in its header, the engine files and version it follows and what its names cannot tell."""


def pack_rules(name: str) -> PhaseRules:
    """The engine pack *name* (``packs/NAME.toml``), read by the same loader as a user's rules
    file, so a pack is checked exactly like one; labelled built-in."""
    rules = load_rules(PACKS_DIR / f"{name}.toml")
    return replace(rules, source="built-in")


BUILTIN_RULES: dict[str, Callable[[], PhaseRules]] = {
    "specnsys": default_rules,
    "nvtx": _nvtx_rules,
    **{name: partial(pack_rules, name) for name in ENGINE_PACKS},
}
"""Rule sets usable by name (``--rules specnsys``, ``--rules nvtx``, ``--rules vllm`` ...)."""


def builtin_rules(name: str) -> PhaseRules:
    """The built-in rule set called *name*; BadInputError naming the choices otherwise."""
    try:
        return BUILTIN_RULES[name]()
    except KeyError:
        choices = ", ".join(sorted(BUILTIN_RULES))
        raise BadInputError(f"unknown built-in rule set {name!r} (choose from {choices})") from None


def resolve_rules(spec: str | Path | PhaseRules | None) -> PhaseRules:
    """Rules from a built-in name, a TOML path, a PhaseRules, or None (the default set)."""
    if spec is None:
        return default_rules()
    if isinstance(spec, PhaseRules):
        return spec
    if isinstance(spec, str) and spec in BUILTIN_RULES:
        return builtin_rules(spec)
    path = Path(spec)
    if not path.exists() and path.suffix != ".toml" and len(path.parts) == 1:
        choices = ", ".join(sorted(BUILTIN_RULES))
        raise BadInputError(f"{spec}: neither a built-in rule set ({choices}) nor a rules file")
    return load_rules(path)


#: A rules file is a few dozen lines; anything this big is not one (``/dev/zero``, a trace).
RULES_MAX_BYTES = 1 << 20


def _read_rules_text(path: Path) -> str:
    """The text of a rules file: a regular file of at most :data:`RULES_MAX_BYTES`."""
    return read_small_text(path, what="a rules file is a TOML file", max_bytes=RULES_MAX_BYTES)


def load_rules(path: str | Path) -> PhaseRules:
    """Parse a rules TOML file (format in the module docs); one-line BadInputError if invalid."""
    path = Path(path)
    where = str(path)
    try:
        data = tomllib.loads(_read_rules_text(path))
    except FileNotFoundError:
        raise BadInputError(f"{where}: rules file not found") from None
    except IsADirectoryError:
        raise BadInputError(f"{where}: is a directory, not a rules file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"{where}: cannot read rules file ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise BadInputError(f"{where}: not valid TOML ({exc})") from None

    unknown = set(data) - _FILE_KEYS
    if unknown:
        raise BadInputError(
            f"{where}: unknown key(s) {sorted(unknown)} (allowed: {sorted(_FILE_KEYS)})"
        )
    custom = data.get("custom_phases", False)
    if not isinstance(custom, bool):
        raise BadInputError(f"{where}: custom_phases must be true or false")
    base: PhaseRules | None = None
    if "extends" in data:
        if not isinstance(data["extends"], str):
            raise BadInputError(f"{where}: extends must name a built-in rule set")
        base = builtin_rules(data["extends"])
    raw_rules = data.get("rule", [])
    if not isinstance(raw_rules, list) or not all(isinstance(r, dict) for r in raw_rules):
        raise BadInputError(f"{where}: rules are written as [[rule]] tables")
    if not raw_rules and base is None:
        raise BadInputError(f"{where}: no [[rule]] tables and nothing extended: no phases")

    allowed = {*PHASES, REQUEST, NAME_PLACEHOLDER}
    rules: list[PhaseRule] = []
    for number, raw in enumerate(raw_rules, start=1):
        label = f"{where}: rule {number}"
        extra = set(raw) - _RULE_KEYS
        if extra:
            raise BadInputError(
                f"{label}: unknown key(s) {sorted(extra)} (allowed: {', '.join(sorted(_RULE_KEYS))})"
            )
        phase = raw.get("phase")
        if not isinstance(phase, str) or not phase.strip():
            raise BadInputError(f"{label}: 'phase' must be a non-empty string")
        if phase not in allowed and not custom:
            raise BadInputError(
                f"{label}: {phase!r} is not a phase of the vocabulary ({', '.join(PHASES)}, "
                "request); set custom_phases = true to allow other names"
            )
        patterns = {}
        for key in ("name", "domain", "strip"):
            value = raw.get(key)
            if value is not None and not isinstance(value, str):
                raise BadInputError(f"{label}: '{key}' must be a regex string")
            if value is not None:
                _check_regex(value, f"{label}: '{key}'")
            patterns[key] = value
        if patterns["strip"] is not None and phase != NAME_PLACEHOLDER:
            raise BadInputError(f"{label}: 'strip' only applies to phase = \"{{name}}\"")
        rules.append(PhaseRule(phase, patterns["name"], patterns["domain"], patterns["strip"]))

    all_rules = (*(base.rules if base else ()), *rules)
    named = [r.phase for r in all_rules if r.phase not in (NAME_PLACEHOLDER, REQUEST)]
    declared = [*(base.phases if base else ()), *named]
    vocab_first = [p for p in PHASES if p in declared] + [p for p in declared if p not in PHASES]
    name = data.get("name", path.stem)
    if not isinstance(name, str):
        raise BadInputError(f"{where}: name must be a string")
    categories = (*(base.categories if base else ()), *_load_categories(data, where))
    return PhaseRules(
        name, all_rules, tuple(dict.fromkeys(vocab_first)), source=where, categories=categories
    )


def _load_categories(data: dict[str, object], where: str) -> tuple[KernelCategory, ...]:
    """The file's ``[[category]]`` tables: a name and an RE2 pattern each, checked."""
    raw = data.get("category", [])
    if not isinstance(raw, list) or not all(isinstance(c, dict) for c in raw):
        raise BadInputError(f"{where}: kernel categories are written as [[category]] tables")
    out: list[KernelCategory] = []
    for number, entry in enumerate(raw, start=1):
        label = f"{where}: category {number}"
        extra = set(entry) - _CATEGORY_KEYS
        if extra:
            raise BadInputError(
                f"{label}: unknown key(s) {sorted(extra)} (allowed: name, pattern)"
            )
        name, pattern = entry.get("name"), entry.get("pattern")
        if not isinstance(name, str) or not name.strip():
            raise BadInputError(f"{label}: 'name' must be a non-empty string")
        if not isinstance(pattern, str) or not pattern:
            raise BadInputError(f"{label}: 'pattern' must be a regex string")
        _check_regex(pattern, f"{label}: 'pattern'")
        out.append(KernelCategory(name.strip(), pattern))
    return tuple(out)


def _check_regex(pattern: str, label: str) -> None:
    """Refuse a pattern RE2 (DuckDB's engine) cannot compile, before any trace is read."""
    import duckdb

    try:
        duckdb.connect().execute("SELECT regexp_matches('', ?)", [pattern]).fetchall()
    except duckdb.Error as exc:
        detail = " ".join(str(exc).split())
        raise BadInputError(f"{label} is not a valid regex: {pattern!r} ({detail})") from None
