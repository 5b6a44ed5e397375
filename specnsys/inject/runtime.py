"""Apply an annotation file inside the running program, without editing it.

Three moments at which a hooked callable can first be reached, three mechanisms:

* **Modules already imported** when the injection starts are patched at once.
* **Modules imported later** are patched right after their code ran and before the importer
  gets them (a :data:`sys.meta_path` finder that wraps the loader of the named modules only), so
  that ``from mypkg.model import generate`` already binds the wrapper.
* **The script itself** (``__main__``) exists only while it runs: its functions are bound one
  statement at a time. A trace function follows the lines of the script's module-level code
  only and patches each named function, class or method as soon as its statement has bound it,
  so before ``main()`` (or any later statement) can call it. The trace stops once every
  ``__main__`` entry is patched, or as soon as the rest cannot be bound (their names are not
  among the names the script's code stores), so a profiled loop never runs under a tracer.

Objects a factory returns are hooked per instance when the factory returns them (draft and
target of one class get different phases). Entries that never matched are listed in one warning
line when the program exits, so that a typo does not pass silently.
"""

from __future__ import annotations

import atexit
import builtins
import importlib.abc
import importlib.machinery
import os
import sys
import threading
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specnsys import annotate
from specnsys.inject import AUTO_ENV, CONFIG_ENV
from specnsys.inject.config import Config, Hook, ObjectRule, Target, load_config
from specnsys.inject.emit import Emitter, LogEmitter
from specnsys.inject.hooks import Reporter, Runtime, make_wrapper

if TYPE_CHECKING:
    from _typeshed import TraceFunction

#: What a wrapper factory turns a callable into (its wrapper).
Wrapping = Callable[[Callable[..., object]], Callable[..., object]]

__all__ = ["CONFIG_ENV", "DEPTH_ENV", "LOG_ENV", "Injection", "install", "install_from_env"]

LOG_ENV = "SPECNSYS_ANNOTATE_LOG"  # optional: a text file that receives every event
DEPTH_ENV = "SPECNSYS_ANNOTATE_DEPTH"  # 0 in the profiled program, 1 in its children...
VERBOSE_ENV = "SPECNSYS_ANNOTATE_VERBOSE"  # 1: also what applied but never happened (notes)

MAIN = "__main__"


@dataclass
class _Site:
    """One callable to wrap: the hook entries on it (tried in file order at each call), the
    object rules it is the factory of, and whether other entries follow its calls (a callable
    named only in ``inside``, ``outside`` or ``until`` is wrapped with no entry of its own)."""

    target: Target
    hooks: list[Hook] = field(default_factory=list)
    rules: list[ObjectRule] = field(default_factory=list)
    followed: bool = False  # named in inside/outside/until
    done: bool = False
    why: str = ""  # why it was not applied (for the exit warning)

    @property
    def entries(self) -> list[str]:
        hooks = [h.entry for h in self.hooks] + [r.entry for r in self.rules]
        return hooks or [f"{self.target.text} (named in inside/outside/until)"]

    @property
    def optional(self) -> bool:
        """Every entry on it says ``optional = true`` (a callable some versions lack)."""
        return bool(self.hooks) and not self.rules and all(h.optional for h in self.hooks)

    @property
    def subclasses(self) -> bool:
        return any(h.subclasses for h in self.hooks)


class Injection:
    """The hooks of one annotation file in this process."""

    def __init__(
        self, config: Config, emitter: Emitter | None = None, reporter: Reporter | None = None
    ) -> None:
        self.config = config
        self.emitter = emitter or Emitter()
        self.reporter = reporter or Reporter(config.label)
        self.patch = annotate.Patch()
        self.sites: dict[str, list[_Site]] = {}  # module name -> sites in it
        self.selected: set[str] = set()  # object entries that selected at least one object
        self.called: set[str] = set()  # hook entries that ran at least once (for tests)
        self.attach_failures: dict[str, str] = {}  # entry -> why a selected object's method
        self.runtime = Runtime(self.emitter, self.reporter, self, self.called.add)
        by_key: dict[tuple[str, str], _Site] = {}
        for hook in config.hooks:
            if hook.target.module is not None:
                by_key.setdefault(hook.target.key, _Site(hook.target)).hooks.append(hook)
        for rule in config.objects:
            by_key.setdefault(rule.factory.key, _Site(rule.factory)).rules.append(rule)
        for target in config.scope_targets:
            if target.module is not None:
                by_key.setdefault(target.key, _Site(target)).followed = True
        for site in by_key.values():
            assert site.target.module is not None
            self.sites.setdefault(site.target.module, []).append(site)
        # methods of named objects: NAME -> method -> entries on it (and whether followed)
        self.object_sites: dict[str, dict[str, _Site]] = {}
        for hook in config.hooks:
            if hook.target.obj is not None:
                self._object_site(hook.target).hooks.append(hook)
        for target in config.scope_targets:
            if target.obj is not None:
                self._object_site(target).followed = True
        self._lock = threading.RLock()
        self._finder: _PostImportFinder | None = None

    def _object_site(self, target: Target) -> _Site:
        assert target.obj is not None
        methods = self.object_sites.setdefault(target.obj, {})
        return methods.setdefault(target.qualname, _Site(target))

    # --- modules ----------------------------------------------------------------------------

    def apply_module(self, name: str, module: types.ModuleType, *, final: bool = True) -> bool:
        """Wrap the callables named in module *name*; True when none is left to do. With
        ``final=False`` a name the module does not have yet stays pending (``__main__``)."""
        with self._lock:
            for site in self.sites.get(name, []):
                if not site.done:
                    self._apply(site, module, final)
            return all(s.done or s.why for s in self.sites.get(name, []))

    def _apply(self, site: _Site, module: types.ModuleType, final: bool) -> None:
        owner: object = module
        parts = site.target.qualname.split(".")
        for depth, part in enumerate(parts[:-1]):
            try:
                owner = getattr(owner, part)
            except AttributeError:
                if depth == 0 and not final:
                    return  # not bound yet
                site.why = f"{'.'.join([site.target.module or '', *parts[:depth + 1]])} not found"
                return
        attr = parts[-1]
        if not hasattr(owner, attr):
            if len(parts) == 1 and not final:
                return
            site.why = f"{site.target.module} has no {site.target.qualname!r}"
            return
        try:
            annotate.wrap_attr(owner, attr, self._wrapper_for(site), patch=self.patch)
        except (TypeError, AttributeError) as exc:  # not callable, or read-only (a builtin type)
            site.why = f"cannot be wrapped: {exc}"
            return
        if site.subclasses and isinstance(owner, type):
            self._follow_subclasses(site, owner, attr)
        site.done = True

    def _wrapper_for(self, site: _Site) -> Wrapping:
        return self._wrapping(site.target.key, site.hooks, site.rules, site.target.text)

    def _wrapping(
        self, key: tuple[str, str], hooks: Sequence[Hook], rules: Sequence[ObjectRule],
        where: str,
    ) -> Wrapping:
        def wrap(func: Callable[..., object]) -> Callable[..., object]:
            wrapper = make_wrapper(func, key, hooks, rules, self.runtime, where=where)
            wrapper.__specnsys_injection__ = self  # type: ignore[attr-defined]
            return wrapper

        return wrap

    # --- subclasses ---------------------------------------------------------------------------

    def _follow_subclasses(self, site: _Site, base: type, attr: str) -> None:
        """``subclasses = true``: wrap *attr* where a subclass of *base* defines its own (the
        base's wrapper does not see an override), now and for subclasses defined later."""
        for cls in _all_subclasses(base):
            self._wrap_override(site, cls, attr)
        original = base.__dict__.get("__init_subclass__")  # a classmethod, or inherited
        injection = self

        def init_subclass(cls: type, /, **kwargs: object) -> None:
            if original is not None:
                original.__get__(None, cls)(**kwargs)
            else:
                super(base, cls).__init_subclass__(**kwargs)  # type: ignore[arg-type]
            injection._wrap_override(site, cls, attr)

        base.__init_subclass__ = classmethod(init_subclass)  # type: ignore[assignment]
        self.patch._add(base, "__init_subclass__", original is not None, original)

    def _wrap_override(self, site: _Site, cls: type, attr: str) -> None:
        own = cls.__dict__.get(attr)
        if own is None or getattr(own, "__specnsys_injection__", None) is self:
            return
        try:
            annotate.wrap_attr(cls, attr, self._wrapper_for(site), patch=self.patch)
        except (TypeError, AttributeError) as exc:
            self.reporter.warn_once(
                site.entries[0], f"subclass {cls.__qualname__}",
                f"{site.entries[0]}: cannot hook {cls.__module__}.{cls.__qualname__}.{attr}: {exc}",
            )

    # --- objects ----------------------------------------------------------------------------

    def attach(self, rule: ObjectRule, obj: object) -> None:
        """Hook the methods named ``NAME.method`` on *obj*, the object *rule* selected (once:
        an object selected again keeps the wrappers it has)."""
        self.selected.add(rule.entry)
        for method, site in self.object_sites.get(rule.name, {}).items():
            own = getattr(obj, "__dict__", {}).get(method)
            if getattr(own, "__specnsys_injection__", None) is self:
                continue
            where = f"{site.target.text} ({type(obj).__name__} from {rule.factory.text})"
            try:
                annotate.wrap_attr(
                    obj, method, self._wrapping(site.target.key, site.hooks, (), where),
                    patch=self.patch,
                )
            except (TypeError, AttributeError) as exc:
                # said once, in the exit line with everything else that did not apply
                self.attach_failures.setdefault(
                    site.entries[0],
                    f"cannot hook {method!r} of the {type(obj).__name__} {rule.factory.text} "
                    f"gave ({exc})",
                )

    # --- the exit report --------------------------------------------------------------------

    def unmatched(self, *, main: bool = True) -> list[str]:
        """What never took effect, one clause per entry (empty when everything did); without
        *main*, entries on ``__main__`` are left out (in a child process they name another
        program's script)."""
        clauses: dict[str, str] = {}  # entry -> why
        for name, sites in self.sites.items():
            if name == MAIN and not main:
                continue
            for site in sites:
                if site.done or (site.optional and not site.why.startswith("cannot")):
                    continue
                if self.config.requires and name not in sys.modules:
                    continue  # a library's file: a module of it the program never used
                why = site.why or (
                    f"module {name} was never imported (the script, or the module run with "
                    "python -m, is __main__)" if name not in sys.modules
                    else f"{site.target.text} was never defined"
                )
                clauses.update(dict.fromkeys(site.entries, why))
        for entry, why in self.attach_failures.items():
            clauses.setdefault(entry, why)
        # A hook that was applied but never called is not reported (one file may serve a
        # baseline and a speculative run, each calling only its own functions), and neither is
        # an object its factory never built in this run: see notes().
        return [f"{entry}: {why}" for entry, why in clauses.items()]

    def notes(self, *, main: bool = True) -> list[str]:
        """What applied but never happened in this run: objects never selected."""
        out = []
        for rule in self.config.objects:
            if rule.factory.module == MAIN and not main:
                continue
            if rule.entry not in self.selected:
                how = f"call = {rule.call}" if rule.call else "the 'where' value"
                if rule.call and rule.where:
                    how += " and the 'where' value"
                if not rule.call and not rule.where:
                    how = "any call"
                out.append(f"{rule.entry}: {rule.factory.text} never gave an object "
                           f"({how}) in this run")
        return out

    def report_unmatched(self, *, main: bool = True) -> None:
        if self.config.requires and self.config.requires not in sys.modules:
            self.reporter.warn(f"{self.config.requires} was never imported: nothing annotated")
            return
        clauses = self.unmatched(main=main)
        if clauses:
            self.reporter.warn("not applied in this process: " + "; ".join(clauses))
        if os.environ.get(VERBOSE_ENV, "") not in ("", "0"):
            for note in self.notes(main=main):
                self.reporter.warn(note, kind="note")

    # --- install ----------------------------------------------------------------------------

    def install(self, *, watch_main: bool = True) -> None:
        """Patch what is imported, hook later imports, follow the script (see module doc)."""
        for name in list(self.sites):
            module = sys.modules.get(name)
            if name != MAIN and module is not None:
                self.apply_module(name, module)
        later = {n for n in self.sites if n != MAIN and n not in sys.modules}
        if later:
            self._finder = _PostImportFinder(later, self.apply_module)
            sys.meta_path.insert(0, self._finder)
        if watch_main and MAIN in self.sites:
            _follow_main(self)

    def uninstall(self) -> None:
        """Stop hooking imports and restore every wrapped callable (tests; a program that
        wants its originals back)."""
        if self._finder is not None and self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        self._finder = None
        self.patch.undo()


def _all_subclasses(base: type) -> list[type]:
    seen: dict[type, None] = {}
    stack: list[type] = list(base.__subclasses__())
    while stack:
        cls = stack.pop()
        if cls not in seen:
            seen[cls] = None
            stack.extend(cls.__subclasses__())
    return list(seen)


class _PatchingLoader(importlib.abc.Loader):
    """The real loader of a named module, then the injection's patches of it."""

    def __init__(self, loader: importlib.abc.Loader, name: str, done: Callable[..., bool]) -> None:
        self._loader, self._name, self._done = loader, name, done

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: types.ModuleType) -> None:
        self._loader.exec_module(module)
        self._done(self._name, module)

    def __getattr__(self, name: str) -> object:  # get_source, is_package, resource readers...
        return getattr(self._loader, name)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for the named modules, asks the other finders and wraps the
    loader they return, so the module is patched once its code ran."""

    def __init__(self, names: set[str], done: Callable[..., bool]) -> None:
        self._names, self._done = set(names), done
        self._busy = threading.local()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self._names or getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec: importlib.machinery.ModuleSpec | None = find(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._busy.on = False
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        self._names.discard(fullname)
        spec.loader = _PatchingLoader(spec.loader, fullname, self._done)
        return spec


def _follow_main(injection: Injection) -> None:
    """Patch ``__main__`` entries as the script binds them (see the module docstring)."""
    main = sys.modules.get(MAIN)
    if main is None or sys.gettrace() is not None:
        # A debugger or coverage tracer owns sys.settrace; say so rather than break it.
        injection.reporter.warn(
            "a tracer (debugger, coverage) is active: __main__ entries are not applied"
        )
        return
    _MainFollower(injection, main).start()


class _MainFollower:
    """Follows the lines of the script's module-level code until its entries are bound.

    Tracing slows all Python code while it is on (CPython checks every instruction), so it is
    on for as short as possible: the global trace function is the C builtin ``getattr`` once
    the script's frame is found (``getattr(frame, "call", None)`` is None: no other frame is
    traced), and it is off during the script's own import statements (``import torch`` is
    most of a script's start-up); the script's frame keeps its line tracer meanwhile.
    """

    def __init__(self, injection: Injection, main: types.ModuleType) -> None:
        self.injection, self.main, self.main_dict = injection, main, vars(main)
        self.frame: types.FrameType | None = None
        self.original_import: Callable[..., types.ModuleType] = builtins.__import__
        # one bound method, to compare by is
        self.hook: Callable[..., types.ModuleType] = self.quiet_import

    def start(self) -> None:
        sys.settrace(self.calls)

    def stop(self) -> None:
        sys.settrace(None)
        if self.frame is not None:
            self.frame.f_trace = None
            self.frame = None
        if builtins.__import__ is self.hook:  # unless the program replaced it since
            builtins.__import__ = self.original_import

    def calls(self, frame: types.FrameType, event: str, arg: object) -> TraceFunction | None:
        """Global trace function until the script's module frame starts."""
        if frame.f_globals is not self.main_dict or frame.f_code.co_name != "<module>":
            return None
        self.frame = frame
        stored = set(frame.f_code.co_names)  # every name the script's code can bind
        for site in self.injection.sites[MAIN]:
            head = site.target.qualname.split(".")[0]
            if head not in stored and head not in self.main_dict:
                site.why = f"the script never defines {head!r}"
        if self.injection.apply_module(MAIN, self.main, final=False):
            self.stop()
            return None
        sys.settrace(getattr)
        self.original_import = builtins.__import__
        builtins.__import__ = self.hook
        return self.lines

    def lines(self, frame: types.FrameType, event: str, arg: object) -> TraceFunction | None:
        """Local trace function of the script's module frame: patch what each line bound."""
        if self.injection.apply_module(MAIN, self.main, final=event == "return"):
            self.stop()
            return None
        if event == "return":
            self.stop()
        return self.lines

    def quiet_import(self, *args: object, **kwargs: object) -> types.ModuleType:
        """``__import__`` with tracing off (an import binds no name the script defines)."""
        original = self.original_import
        if self.frame is None or sys._getframe(1) is not self.frame:
            return original(*args, **kwargs)
        sys.settrace(None)
        try:
            return original(*args, **kwargs)
        finally:
            if self.frame is not None:
                sys.settrace(getattr)


def install(
    config: Config, *, emitter: Emitter | None = None, reporter: Reporter | None = None,
    report_at_exit: bool = True,
) -> Injection:
    """Install *config*'s hooks in this process and return them."""
    injection = Injection(config, emitter, reporter)
    injection.install()
    if report_at_exit:
        atexit.register(injection.report_unmatched)
    return injection


def _label(path: str) -> str:
    """How warnings name the file: ``preset hf`` for a built-in preset, else its file name."""
    from specnsys.inject.presets import preset_name

    name = preset_name(path)
    return f"preset {name}" if name else os.path.basename(path)


def install_from_env() -> Injection | None:
    """What the bootstrap ``sitecustomize`` runs: the file named by ``SPECNSYS_ANNOTATE``.

    Never raises: an injection that cannot start says why in one line and the program runs
    unannotated. The exit report is given by the profiled program, and by a child process
    only where it applied something and without the ``__main__`` entries (a helper
    subprocess should not repeat every entry).
    """
    path = os.environ.get(CONFIG_ENV)
    if not path:
        return None
    level = os.environ.get(DEPTH_ENV, "0")
    depth = int(level) if level.isdigit() else 0
    os.environ[DEPTH_ENV] = str(depth + 1)  # what this program's children inherit
    label = _label(path)
    auto = bool(os.environ.get(AUTO_ENV))
    try:
        config = load_config(path)
        emitter: Emitter | None = None
        log = os.environ.get(LOG_ENV)
        if log:
            emitter = LogEmitter(open(log, "a", encoding="utf-8", buffering=1))  # noqa: SIM115
        injection = install(config, emitter=emitter, report_at_exit=False,
                            reporter=Reporter(label))
    except Exception as exc:
        Reporter(label).warn(f"annotations not applied: {' '.join(str(exc).split())}")
        return None

    def report() -> None:
        if auto and config.requires and config.requires not in sys.modules:
            return  # chosen by profile for programs that import it: this one does not
        applied = any(s.done for sites in injection.sites.values() for s in sites)
        if depth == 0 or applied:
            injection.report_unmatched(main=depth == 0)

    atexit.register(report)
    return injection
