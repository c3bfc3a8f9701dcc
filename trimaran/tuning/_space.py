"""The search space: Katib's ``spec.parameters``, and how each parameter is sampled and written.

Every parameter has an *internal coordinate* (a `Domain`) that samplers work in, and two maps:
``encode`` (a Katib string, as stored on a trial, to the coordinate) and ``decode`` (back to the
string a trial receives). The coordinate is chosen so that ``encode(decode(v)) == v`` exactly
wherever possible; then a study rebuilt from stored strings equals the one the sampler asked from.

==============================  ======================================  ===============================
Katib parameter                 internal coordinate (`Domain`)          string written
==============================  ======================================  ===============================
categorical / discrete          categorical over ``list``               the list item as given
int, uniform / logUniform       int in [min, max], step (log: step 1)   ``"3"`` (never ``"3.0"``)
double, uniform, no step        float in [min, max]                     ``repr(float)``
double, logUniform              float in [min, max], log scale          ``repr(float)``; step ignored
double, uniform, with step      int index k of ``min + k*step``         decimal-exact: ``"0.3"``
int/double, normal/logNormal    float u = Phi(z) in [Phi(-3), Phi(3)]   snapped to int / step
==============================  ======================================  ===============================

``normal``/``logNormal`` follow Katib's hyperopt mapping: mu = (min+max)/2 and sigma = (max-min)/6,
in log space for logNormal. Optuna cannot express a normal prior, so the coordinate is the normal
CDF u = Phi((x-mu)/sigma): a sampler that is uniform in u is normal in x. Unlike hyperopt, values
are truncated to [min, max] (hyperopt's normal is unbounded, and would write values outside the
space the manifest declares). Katib's optuna service rejects these distributions instead.

Grid search ignores distributions and enumerates Katib's grid (`Parameter.grid_values`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from statistics import NormalDist
from typing import Any, Literal

from trimaran.tuning.errors import SearchSpaceError

__all__ = ["Domain", "Parameter", "SearchSpace"]

ParameterType = Literal["double", "int", "discrete", "categorical"]
DistributionName = Literal["uniform", "logUniform", "normal", "logNormal"]

_TYPES = ("double", "int", "discrete", "categorical")
_DISTRIBUTIONS = ("uniform", "logUniform", "normal", "logNormal")
_STD_NORMAL = NormalDist()
# Katib's hyperopt mapping puts min and max at mu -/+ 3 sigma.
_Z = 3.0
_U_LO = 0.5 * math.erfc(_Z / math.sqrt(2.0))
_U_HI = 1.0 - _U_LO
# Tolerance when checking that a stored double lies on a step grid (decimal strings are exact;
# this only forgives values another tool wrote with binary rounding, like 0.30000000000000004).
_GRID_TOL = 1e-9


@dataclass(frozen=True)
class Domain:
    """A parameter's internal coordinate, the way an Optuna distribution describes one.

    ``kind`` is ``"categorical"`` (``choices``), ``"int"`` (``low``..``high`` by ``step``, optionally
    on a log scale) or ``"float"`` (``low``..``high``, optionally on a log scale).
    """

    kind: Literal["categorical", "int", "float"]
    low: float = 0.0
    high: float = 0.0
    step: int = 1
    log: bool = False
    choices: tuple[str, ...] = ()


def _phi(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def _decimal_text(d: Decimal) -> str:
    # format(..., "f") never writes an exponent ("1E+1" -> "10"); normalize() drops trailing
    # zeros. A double keeps one decimal ("1.0"), as Python and Katib write floats.
    out = format(d.normalize(), "f")
    if out.startswith("-") and Decimal(out) == 0:
        out = out[1:]
    return out if "." in out else out + ".0"


@dataclass(frozen=True)
class Parameter:
    """One dimension of the search space, as Katib declares it (all bounds kept as strings).

    Build parameters with `SearchSpace.from_parameters`, which validates them; the constructor
    trusts its arguments.

    Args:
        name: The parameter's name (what ``trialParameters[].reference`` points at).
        type: ``double``, ``int``, ``discrete`` or ``categorical``.
        distribution: ``uniform``, ``logUniform``, ``normal`` or ``logNormal``.
        min: Lower bound (double/int).
        max: Upper bound (double/int).
        step: Optional step (double/int); required by grid for doubles.
        choices: The ``list`` of a discrete/categorical parameter.
    """

    name: str
    type: ParameterType
    distribution: DistributionName = "uniform"
    min: str | None = None
    max: str | None = None
    step: str | None = None
    choices: tuple[str, ...] = ()
    # Derived once in __post_init__; excluded from equality and hashing.
    _kind: str = field(default="", init=False, repr=False, compare=False)
    _lo: float = field(default=0.0, init=False, repr=False, compare=False)
    _hi: float = field(default=0.0, init=False, repr=False, compare=False)
    _istep: int = field(default=1, init=False, repr=False, compare=False)
    _dlo: Decimal = field(default=Decimal(0), init=False, repr=False, compare=False)
    _dstep: Decimal = field(default=Decimal(1), init=False, repr=False, compare=False)
    _size: int | None = field(default=None, init=False, repr=False, compare=False)
    _mu: float = field(default=0.0, init=False, repr=False, compare=False)
    _sigma: float = field(default=0.0, init=False, repr=False, compare=False)
    _index: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if self.type in ("discrete", "categorical"):
            set_(self, "_kind", "cat")
            set_(self, "_size", len(self.choices))
            set_(self, "_index", {c: i for i, c in enumerate(self.choices)})
            return
        lo, hi = float(self.min), float(self.max)  # type: ignore[arg-type]
        log = self.distribution in ("logUniform", "logNormal")
        if self.distribution in ("normal", "logNormal") and hi > lo:
            set_(self, "_kind", "normal")
            tlo, thi = (math.log(lo), math.log(hi)) if log else (lo, hi)
            set_(self, "_mu", (tlo + thi) / 2.0)
            set_(self, "_sigma", (thi - tlo) / (2.0 * _Z))
        elif self.type == "int":
            set_(self, "_kind", "int")
        elif self.step is not None and not log:
            set_(self, "_kind", "fstep")
        else:
            set_(self, "_kind", "float")
        set_(self, "_lo", lo)
        set_(self, "_hi", hi)
        if self.type == "int":
            step = 1 if (log and self._kind == "int") or self.step is None else int(float(self.step))
            set_(self, "_istep", step)
            set_(self, "_size", (int(hi) - int(lo)) // step + 1)
        elif self.step is not None:
            dlo, dstep = Decimal(self.min), Decimal(self.step)  # type: ignore[arg-type]
            set_(self, "_dlo", dlo)
            set_(self, "_dstep", dstep)
            set_(self, "_size", int((Decimal(self.max) - dlo) / dstep + Decimal(_GRID_TOL)) + 1)  # type: ignore[arg-type]
        if self._kind == "float":
            set_(self, "_size", None if hi > lo else 1)

    # -- the internal coordinate ------------------------------------------------------------------
    @property
    def domain(self) -> Domain:
        """The internal coordinate samplers see (see the module table)."""
        k = self._kind
        if k == "cat":
            return Domain("categorical", choices=self.choices)
        if k == "int":
            high = self._lo + (self._size - 1) * self._istep  # type: ignore[operator]
            return Domain("int", self._lo, high, self._istep, self.distribution == "logUniform")
        if k == "fstep":
            return Domain("int", 0, self._size - 1)  # type: ignore[operator]
        if k == "normal":
            return Domain("float", _U_LO, _U_HI)
        return Domain("float", self._lo, self._hi, log=self.distribution == "logUniform")

    @property
    def size(self) -> int | None:
        """How many distinct values the parameter can take (None: a continuum)."""
        return self._size

    @property
    def exact(self) -> bool:
        """Whether ``encode(decode(v)) == v`` holds exactly (false only for normal/logNormal)."""
        return self._kind != "normal"

    def encode(self, text: str) -> Any:
        """The internal coordinate of a stored value, or None when the value is not in the space."""
        k = self._kind
        try:
            if k == "cat":
                return text if text in self._index else None
            if k == "int":
                v = float(text)
                if not v.is_integer():
                    return None
                iv = int(v)
                if iv < self._lo or iv > self._hi or (iv - int(self._lo)) % self._istep:
                    return None
                return iv
            if k == "fstep":
                return self._step_index(text)
            v = float(text)
        except (ValueError, TypeError, InvalidOperation):
            return None
        if not math.isfinite(v):
            return None
        if v < self._lo or v > self._hi:
            # Forgive binary rounding by another writer, then clamp.
            tol = 1e-12 * max(1.0, abs(self._lo), abs(self._hi))
            if v < self._lo - tol or v > self._hi + tol:
                return None
            v = min(max(v, self._lo), self._hi)
        if k == "normal":
            if self.type == "int" and not v.is_integer():
                return None
            if self.distribution == "logNormal":
                if v <= 0:
                    return None
                v = math.log(v)
            return min(max(_phi((v - self._mu) / self._sigma), _U_LO), _U_HI)
        return v

    def decode(self, value: Any) -> str:
        """The Katib string for an internal coordinate (ints without ".0")."""
        k = self._kind
        if k == "cat":
            return str(value)
        if k == "int":
            return str(int(value))
        if k == "fstep":
            return _decimal_text(self._dlo + int(value) * self._dstep)
        if k == "normal":
            u = min(max(float(value), _U_LO), _U_HI)
            x = self._mu + self._sigma * _STD_NORMAL.inv_cdf(u)
            if self.distribution == "logNormal":
                x = math.exp(x)
            return self._snap(x)
        return repr(float(value))

    def from_unit(self, u: float) -> Any:
        """The internal coordinate at quantile ``u`` in [0, 1) of the parameter's prior.

        Random search, Sobol and CMA-ES work in this unit cube; a discrete parameter with K values
        gives each value a cell of width 1/K.
        """
        k = self._kind
        if k in ("cat", "fstep") or (k == "int" and self.distribution != "logUniform"):
            i = min(int(u * self._size), self._size - 1)  # type: ignore[operator]
            if k == "cat":
                return self.choices[i]
            if k == "fstep":
                return i
            return int(self._lo) + i * self._istep
        if k == "int":
            # Optuna's log-int rule: uniform in log space over [min-0.5, max+0.5], then rounded.
            a, b = math.log(self._lo - 0.5), math.log(self._hi + 0.5)
            return int(min(max(round(math.exp(a + u * (b - a))), self._lo), self._hi))
        if k == "normal":
            return _U_LO + u * (_U_HI - _U_LO)
        if self.distribution == "logUniform":
            a, b = math.log(self._lo), math.log(self._hi)
            return min(max(math.exp(a + u * (b - a)), self._lo), self._hi)
        return min(self._lo + u * (self._hi - self._lo), self._hi)

    def to_unit(self, value: Any) -> float:
        """The inverse of `from_unit` (the centre of the value's cell for discrete parameters)."""
        k = self._kind
        if k == "cat":
            return (self._index[value] + 0.5) / self._size  # type: ignore[operator]
        if k == "fstep":
            return (int(value) + 0.5) / self._size  # type: ignore[operator]
        if k == "int" and self.distribution != "logUniform":
            return ((int(value) - int(self._lo)) // self._istep + 0.5) / self._size  # type: ignore[operator]
        if k == "int":
            a, b = math.log(self._lo - 0.5), math.log(self._hi + 0.5)
            return (math.log(value) - a) / (b - a)
        if k == "normal":
            return (float(value) - _U_LO) / (_U_HI - _U_LO)
        if self._hi == self._lo:
            return 0.5
        if self.distribution == "logUniform":
            a, b = math.log(self._lo), math.log(self._hi)
            return (math.log(value) - a) / (b - a)
        return (float(value) - self._lo) / (self._hi - self._lo)

    def values(self) -> tuple[str, ...] | None:
        """Every value the parameter can take, as strings (None for a continuum)."""
        if self._size is None:
            return None
        if self._kind == "cat":
            return self.choices
        if self.type == "int":
            return tuple(str(int(self._lo) + i * self._istep) for i in range(self._size))
        if self.step is not None:
            return tuple(_decimal_text(self._dlo + i * self._dstep) for i in range(self._size))
        return (self.decode(self.from_unit(0.5)),)

    def canonical(self, text: str) -> str | None:
        """The string this parameter would write for a stored value, or None if not in the space."""
        value = self.encode(text)
        return None if value is None else self.decode(value)

    # -- Katib's grid --------------------------------------------------------------------------------
    def grid_values(self) -> tuple[str, ...]:
        """Katib's enumeration: int ``range(min, max+1, step)``, double ``min + k*step`` up to max
        (step required), lists as given. Distributions are ignored, as Katib's grid ignores them."""
        if self._kind == "cat":
            return self.choices
        if self.type == "int":
            step = int(float(self.step)) if self.step else 1
            return tuple(str(v) for v in range(int(self._lo), int(self._hi) + 1, step))
        if self.step is None:
            raise SearchSpaceError(
                f'parameter "{self.name}": grid needs feasibleSpace.step for parameterType double')
        dlo, dstep, dmax = Decimal(self.min), Decimal(self.step), Decimal(self.max)  # type: ignore[arg-type]
        count = int((dmax - dlo) / dstep + Decimal(_GRID_TOL)) + 1
        return tuple(_decimal_text(dlo + k * dstep) for k in range(count))

    def grid_index(self, text: str) -> int | None:
        """The position of a stored value in `grid_values`, or None when it is not a grid point."""
        if self._kind == "cat":
            return self._index.get(text)
        try:
            if self.type == "int":
                v = float(text)
                step = int(float(self.step)) if self.step else 1
                if not v.is_integer() or v < self._lo or v > self._hi or (int(v) - int(self._lo)) % step:
                    return None
                return (int(v) - int(self._lo)) // step
            if self.step is None:
                return None
            return self._step_index(text, grid=True)
        except (ValueError, InvalidOperation):
            return None

    # -- helpers ---------------------------------------------------------------------------------------
    def _step_index(self, text: str, grid: bool = False) -> int | None:
        dlo, dstep = (Decimal(self.min), Decimal(self.step)) if grid else (self._dlo, self._dstep)  # type: ignore[arg-type]
        size = int((Decimal(self.max) - dlo) / dstep + Decimal(_GRID_TOL)) + 1 if grid else self._size  # type: ignore[arg-type]
        q = (Decimal(text) - dlo) / dstep
        k = int(q.to_integral_value())
        if abs(q - k) > Decimal(_GRID_TOL) or k < 0 or k >= size:  # type: ignore[operator]
            return None
        return k

    def _snap(self, x: float) -> str:
        x = min(max(x, self._lo), self._hi)
        if self.type == "int":
            step = int(float(self.step)) if self.step else 1
            k = round((x - self._lo) / step)
            k = min(max(k, 0), self._size - 1)  # type: ignore[operator]
            return str(int(self._lo) + k * step)
        if self.step is not None:
            k = round((x - self._lo) / float(self.step))
            k = min(max(k, 0), self._size - 1)  # type: ignore[operator]
            return _decimal_text(self._dlo + k * self._dstep)
        return repr(x)


def _get(d: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        if k in d and d[k] is not None:
            return d[k]
    return None


def _as_mapping(obj: Any) -> Mapping[str, Any] | None:
    if isinstance(obj, Mapping):
        return obj
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        # The API package's pydantic models (ParameterSpec) dump to Katib's camelCase by alias.
        return dump(by_alias=True, exclude_none=True)
    return None


def _parse_parameter(i: int, spec: Any) -> Parameter:
    path = f"spec.parameters[{i}]"
    d = _as_mapping(spec)
    if d is None:
        raise SearchSpaceError(f"{path}: must be an object with name, parameterType and feasibleSpace")
    name = _get(d, "name")
    if not isinstance(name, str) or not name:
        raise SearchSpaceError(f"{path}.name: Required value")
    ptype = _get(d, "parameterType", "parameter_type")
    if ptype not in _TYPES:
        raise SearchSpaceError(f'{path}.parameterType: Unsupported value: "{ptype}": supported values: '
                               + ", ".join(f'"{t}"' for t in _TYPES))
    fs = _as_mapping(_get(d, "feasibleSpace", "feasible_space") or {})
    if fs is None:
        raise SearchSpaceError(f"{path}.feasibleSpace: must be an object")
    fpath = f"{path}.feasibleSpace"
    dist = _get(fs, "distribution") or "uniform"
    if dist not in _DISTRIBUTIONS:
        raise SearchSpaceError(f'{fpath}.distribution: Unsupported value: "{dist}": supported values: '
                               + ", ".join(f'"{t}"' for t in _DISTRIBUTIONS))
    raw_list = _get(fs, "list", "list_")
    lo, hi, step = (_get(fs, k) for k in ("min", "max", "step"))
    if ptype in ("discrete", "categorical"):
        for key, value in (("min", lo), ("max", hi), ("step", step)):
            if value not in (None, ""):
                raise SearchSpaceError(f"{fpath}.{key}: Forbidden: not supported for parameterType {ptype}")
        if not raw_list:
            raise SearchSpaceError(f"{fpath}.list: Required value: must be set for parameterType {ptype}")
        choices = tuple(str(v) for v in raw_list)
        if len(set(choices)) != len(choices):
            dup = next(c for c in choices if choices.count(c) > 1)
            raise SearchSpaceError(f'{fpath}.list: Duplicate value: "{dup}"')
        if ptype == "discrete":
            for c in choices:
                try:
                    ok = math.isfinite(float(c))
                except ValueError:
                    ok = False
                if not ok:
                    raise SearchSpaceError(f'{fpath}.list: Invalid value: "{c}": discrete values must be numbers')
        # Katib defaults every distribution to uniform; for lists it means nothing.
        return Parameter(name, ptype, "uniform", choices=choices)
    if raw_list:
        raise SearchSpaceError(f"{fpath}.list: Forbidden: not supported for parameterType {ptype}")
    integer = ptype == "int"
    word = "an integer" if integer else "a number"
    texts: dict[str, str] = {}
    nums: dict[str, float] = {}
    for key, value in (("min", lo), ("max", hi), ("step", step)):
        if value in (None, ""):
            if key != "step":
                raise SearchSpaceError(f"{fpath}.{key}: Required value: must be set for parameterType {ptype}")
            continue
        text = str(value).strip()
        try:
            num = float(text)
            Decimal(text)
        except (ValueError, InvalidOperation):
            num = math.nan
        if not math.isfinite(num) or (integer and not num.is_integer()):
            raise SearchSpaceError(f'{fpath}.{key}: Invalid value: "{value}": must be {word}')
        texts[key], nums[key] = (str(int(num)) if integer else text), num
    if nums["min"] > nums["max"]:
        raise SearchSpaceError(f'{fpath}.max: Invalid value: "{hi}": must not be less than min "{lo}"')
    if "step" in nums and nums["step"] <= 0:
        raise SearchSpaceError(f'{fpath}.step: Invalid value: "{step}": must be greater than 0')
    if dist in ("logUniform", "logNormal") and nums["min"] <= 0:
        raise SearchSpaceError(f'{fpath}.min: Invalid value: "{lo}": must be greater than 0 for distribution {dist}')
    return Parameter(name, ptype, dist, texts["min"], texts["max"], texts.get("step"))


@dataclass(frozen=True)
class SearchSpace:
    """Katib's ``spec.parameters``, validated, in declaration order.

    Example:
        >>> space = SearchSpace.from_parameters([
        ...     {"name": "lr", "parameterType": "double",
        ...      "feasibleSpace": {"min": "0.0001", "max": "0.1", "distribution": "logUniform"}},
        ...     {"name": "layers", "parameterType": "int", "feasibleSpace": {"min": "1", "max": "4"}},
        ...     {"name": "opt", "parameterType": "categorical", "feasibleSpace": {"list": ["sgd", "adam"]}},
        ... ])
        >>> space.names
        ('lr', 'layers', 'opt')
        >>> space["layers"].decode(3)
        '3'

    Args:
        parameters: The validated parameters; build them with `from_parameters`.
    """

    parameters: tuple[Parameter, ...]
    _by_name: dict[str, Parameter] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {p.name: p for p in self.parameters})

    @classmethod
    def from_parameters(cls, parameters: Sequence[Any]) -> SearchSpace:
        """Validate Katib's ``spec.parameters`` (dicts with string values, or the API's models).

        Raises `SearchSpaceError` naming the field (``spec.parameters[1].feasibleSpace.min``), with the
        webhook's rules: double/int need min <= max and no list; discrete/categorical need a list
        and no min/max/step; log distributions need min > 0; names are unique.
        """
        if not parameters:
            raise SearchSpaceError("spec.parameters: Required value: at least one parameter is needed")
        params = tuple(_parse_parameter(i, p) for i, p in enumerate(parameters))
        seen: set[str] = set()
        for i, p in enumerate(params):
            if p.name in seen:
                raise SearchSpaceError(f'spec.parameters[{i}].name: Duplicate value: "{p.name}"')
            seen.add(p.name)
        return cls(params)

    # Katib's own word for the same thing.
    from_katib = from_parameters

    @property
    def names(self) -> tuple[str, ...]:
        """Parameter names in declaration order."""
        return tuple(p.name for p in self.parameters)

    def __iter__(self) -> Iterator[Parameter]:
        return iter(self.parameters)

    def __len__(self) -> int:
        return len(self.parameters)

    def __getitem__(self, name: str) -> Parameter:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    @property
    def size(self) -> int | None:
        """The number of distinct points (None when some parameter is continuous)."""
        total = 1
        for p in self.parameters:
            if p.size is None:
                return None
            total *= p.size
        return total

    def encode(self, assignments: Mapping[str, str]) -> dict[str, Any] | None:
        """Internal coordinates of a trial's assignments, or None if any is missing or out of space."""
        out: dict[str, Any] = {}
        for p in self.parameters:
            text = assignments.get(p.name)
            if text is None:
                return None
            value = p.encode(text)
            if value is None:
                return None
            out[p.name] = value
        return out

    def decode(self, values: Mapping[str, Any]) -> dict[str, str]:
        """Katib strings for internal coordinates, in declaration order."""
        return {p.name: p.decode(values[p.name]) for p in self.parameters}

    def key(self, assignments: Mapping[str, str]) -> tuple[str, ...] | None:
        """A canonical identity of a point ("0.10" and "0.1" on a 0.1 step are the same point)."""
        out = []
        for p in self.parameters:
            text = assignments.get(p.name)
            canon = None if text is None else p.canonical(text)
            if canon is None:
                return None
            out.append(canon)
        return tuple(out)

    def from_unit(self, us: Sequence[float]) -> dict[str, str]:
        """The point at unit-cube coordinates ``us`` (one per parameter), as Katib strings."""
        return {p.name: p.decode(p.from_unit(u)) for p, u in zip(self.parameters, us, strict=True)}
