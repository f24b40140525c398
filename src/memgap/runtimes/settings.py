"""A runtime's own settings as lab variants: what each takes, how its values are checked, and the
environment that gives them to an unmodified program (``go:gogc=50`` -> ``GOGC=50``).

Each runtime's settings are one small module beside its reader (``go_settings``, ``jvm_settings``,
``v8_settings``), registered by the spec's head (``go``, ``jvm``, ``node``) and by the reader's name
(``go``, ``jvm``, ``v8``): the registry (``memgap.runtimes``) is the only place that knows them, the
variants and the lab ask it. Each module declares:

- ``KEYS``: setting -> a check of its value (a function that returns what is wrong, "" if nothing);
- ``env(options, environ)``: the variables that carry the settings, each added to what the user's
  environment already holds there (later entries win in GODEBUG, JAVA_TOOL_OPTIONS and NODE_OPTIONS);
- ``variants(peak)``: the specs the lab tries where the baseline ran on that runtime (``peak``: the
  baseline's peak RSS in bytes, for a setting sized from it; None where not measured).

A library with its own memory pool and allocator (Arrow's: ``arrow_settings``; PyTorch's CUDA caching allocator:
``torch_settings``) registers its settings the same way, with the file names of its objects (``libraries``) and
why finding one adds them (``found``): the lab tries them where the baseline's processes carry an allocator
bundled in such an object, or map such an object with a CUDA context open (memgap.lab.choose).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

Check = Callable[[str], str]  # a value -> what is wrong with it, "" where nothing is


@dataclass(frozen=True)
class RuntimeSettings:
    """One runtime's settings, as the lab and the remedies use them."""

    runtime: str   # the reader's name, as the runtime_heap layer and its finding name it ("go", "jvm", "v8")
    prefix: str    # the spec's head ("go", "jvm", "node")
    keys: Mapping[str, Check]
    env: Callable[[Mapping[str, str], Mapping[str, str]], dict[str, str]]
    variants: Callable[[int | None], tuple[str, ...]]
    check_all: Callable[[Mapping[str, str]], str] = field(default=lambda options: "")  # what the keys' mix breaks
    notes: tuple[str, ...] = ()  # said with a recommendation that sets them
    # a library's settings (arrow's memory pool, PyTorch's CUDA cache): the beginnings of its objects' file names,
    # where the baseline's snapshots found one (memgap.lab.choose); () for a runtime's
    libraries: tuple[str, ...] = ()
    found: str = ""  # why such an object found adds them, after its file name (the lab's reason)
    device: bool = False  # they change the GPU's memory, not RSS: the lab judges them on it (memgap.lab.objective)


def check(settings: RuntimeSettings, spec: str, options: Mapping[str, str]) -> str:
    """What is wrong with ``options`` for ``settings`` (one line, naming ``spec``), "" where nothing."""
    if not options:
        return f"variant {spec!r}: name a {settings.prefix} setting ({', '.join(settings.keys)})"
    for key, value in options.items():
        if key not in settings.keys:
            return (f"variant {spec!r}: {settings.prefix} has no setting {key!r} "
                    f"(choose from {', '.join(settings.keys)})")
        wrong = settings.keys[key](value)
        if wrong:
            return f"variant {spec!r}: {key}={value}: {wrong}"
    wrong = settings.check_all(options)
    return f"variant {spec!r}: {wrong}" if wrong else ""


def appended(existing: str, sep: str, *items: str) -> str:
    """``items`` after what a variable already holds (a later entry wins where the runtime reads both)."""
    return sep.join(filter(None, [existing.strip(), *items]))


def whole(low: int, high: int | None = None, also: tuple[str, ...] = ()) -> Check:
    """A whole number in [low, high] (or one of ``also``)."""
    def checked(value: str) -> str:
        if value in also or (value.isascii() and value.isdigit() and low <= int(value)
                             and (high is None or int(value) <= high)):
            return ""
        span = f"from {low} to {high}" if high is not None else f"of at least {low}"
        return f"a whole number {span}" + "".join(f" or {a!r}" for a in also)
    return checked


def pattern(regex: str, words: str) -> Check:
    """A value matching ``regex`` in full; ``words`` say what is expected."""
    compiled = re.compile(regex)

    def checked(value: str) -> str:
        return "" if compiled.fullmatch(value) else words
    return checked


def one_of(*choices: str) -> Check:
    def checked(value: str) -> str:
        return "" if value in choices else f"one of {', '.join(choices)}"
    return checked


def mib_of(share: float, peak: int | None) -> int | None:
    """``share`` of ``peak`` bytes, in whole MiB (at least 16), None where the peak is not known."""
    return None if not peak else max(16, int(peak * share) >> 20)
