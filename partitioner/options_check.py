"""The one check of numeric options: every count, size, duration, level and tolerance that a
user gives goes through :func:`number_option`, which names the option, what it takes and what
it got."""
from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from collections.abc import Mapping
from typing import Any, TypeVar, overload

from partitioner.errors import OptionsError


def names_option(value: Any, name: str, *, item: str = "names (str)") -> tuple[Any, ...]:
    """``value`` (one str, or a list or tuple of them) as a tuple; OptionsError naming the option
    where it is not a list of str (a number, None, bytes, a list holding another type), which
    ``tuple(value)`` would take apart or fail on with Python's TypeError."""
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, (list, tuple, set, frozenset)) or any(not isinstance(v, str) for v in items):
        shown = next((v for v in items if not isinstance(v, str)), items) if isinstance(items, (list, tuple, set,
                                                                                                  frozenset)) else items
        raise OptionsError(f"{name} must be a list of {item}, got {type(shown).__name__} {shown!r:.60}")
    return tuple(items)


@overload
def number_option(value: Any, name: str, *, whole: bool = ..., low: int | None = ..., high: int | None = ...,
                  above: None = ..., text: bool = ..., error: type[OptionsError] = ...) -> int: ...


@overload
def number_option(value: Any, name: str, *, whole: bool = ..., low: float | None = ..., high: float | None = ...,
                  above: float | None = ..., text: bool = ..., error: type[OptionsError] = ...) -> float: ...


def number_option(value: Any, name: str, *, whole: bool = False, low: float | None = None,
                  high: float | None = None, above: float | None = None, text: bool = False,
                  error: type[OptionsError] = OptionsError) -> Any:
    """``value`` checked and returned as an int (``whole``) or a finite float within ``low`` <=
    value <= ``high`` and value > ``above`` (None: no bound); ``text``: strings such as "1e-3"
    are read as numbers too. Anything else is one ``error`` (an :class:`OptionsError`) saying
    "<name> must be <what it takes>, got <value>". Booleans are never numbers here."""
    expected = _expected(whole, low, high, above)
    number: float | int | None = None
    given = value.strip() if text and isinstance(value, str) else value
    if isinstance(given, str) and text:
        try:
            number = int(given) if whole else float(given)
        except ValueError:
            number = None
    elif isinstance(given, bool):
        number = None
    elif whole and isinstance(given, numbers.Integral):
        number = int(given)
    elif not whole and isinstance(given, numbers.Real):
        number = float(given)
    if number is None or (not whole and not math.isfinite(number)) \
            or (low is not None and number < low) or (high is not None and number > high) \
            or (above is not None and number <= above):
        raise error(f"{name} must be {expected}, got {value!r}")
    return number


def _expected(whole: bool, low: float | None, high: float | None, above: float | None) -> str:
    noun = "a whole number" if whole else "a finite number"
    if low is not None and high is not None:
        return f"{noun} in {low}..{high}" if whole else f"{noun} in [{low:g}, {high:g}]"
    bounds = [f"> {above:g}"] if above is not None else []
    if low is not None:
        bounds.append(f">= {low:g}")
    if high is not None:
        bounds.append(f"<= {high:g}")
    return " ".join([noun, " and ".join(bounds)]).strip()


_Options = TypeVar("_Options", bound=type)


def keyword_checked(cls: _Options) -> _Options:
    """A dataclass of options whose constructor names an option it does not have as an
    OptionsError listing the ones it has (Python's own TypeError names only the bad keyword),
    as every options class of the package answers. Put above ``@dataclass``."""
    init = cls.__init__  # type: ignore[misc]
    names = [f.name for f in dataclasses.fields(cls)]

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        unknown = [k for k in kwargs if k not in names]
        if unknown:
            raise OptionsError(f"{cls.__name__} has no option {unknown[0]!r} (its options: {', '.join(names)})")
        init(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[misc]
    return cls


def plain_options(cls: _Options) -> _Options:
    """An options dataclass whose fields hold mappings (read-only views, dicts) made hashable and
    picklable as the others are: hashed by its fields' values (mappings and lists as sorted items
    and tuples: equal options hash alike), pickled and copied by making it again from them. Put
    above ``@dataclass`` (and below :func:`keyword_checked`)."""
    names = [f.name for f in dataclasses.fields(cls) if f.init]

    def __hash__(self: Any) -> int:
        return hash((cls.__name__, *(_frozen(getattr(self, n)) for n in names)))

    def __reduce__(self: Any) -> tuple[Any, ...]:
        return _remade, (cls, {n: _thawed(getattr(self, n)) for n in names})

    cls.__hash__ = __hash__  # type: ignore[assignment]
    cls.__reduce__ = __reduce__  # type: ignore[assignment]
    return cls


def _remade(cls: Any, fields: dict[str, Any]) -> Any:
    return cls(**fields)


def _frozen(value: Any) -> Any:
    if hasattr(value, "tobytes") and hasattr(value, "dtype") and hasattr(value, "shape"):  # (an array: its contents)
        return ("array", str(value.dtype), tuple(value.shape), value.tobytes())
    if isinstance(value, Mapping):
        return tuple(sorted(((k, _frozen(v)) for k, v in value.items()), key=lambda kv: repr(kv[0])))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return frozenset(_frozen(v) for v in value)
    return value


def _thawed(value: Any) -> Any:
    """A read-only mapping view as the dict it shows (what a constructor takes and pickle writes)."""
    return dict(value) if isinstance(value, Mapping) and not isinstance(value, dict) else value

