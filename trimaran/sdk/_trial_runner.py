"""Run one trial of an objective tuned with `TuningClient.tune` (mode ``process``).

    python -m trimaran.sdk._trial_runner /app/objective.pkl --param lr=0.01 --param optimizer=adam

The trial's Job runs this command with the parameters as separate arguments (never a shell
string), substituted by the Experiment controller from ``${trialParameters.<name>}``. It loads
the pickled objective, converts each value to its Python type (float for double, int for int, the
original value for categorical), adds the fixed parameters, and calls ``objective(params)``.

The objective reports with `trimaran.sdk.report_metrics` (the Push collector). If it *returns* a
number, that number is reported as the objective metric; a returned dict is reported as metrics.
An exception ends the process with status 1 and the traceback in the trial's log: the trial fails.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from trimaran.sdk._metrics import as_number, report_metrics
from trimaran.sdk._payload import import_reference, load_payload
from trimaran.sdk.search import to_python

__all__ = ["main", "parse_arguments"]

_USAGE = "usage: python -m trimaran.sdk._trial_runner PAYLOAD [--param NAME=VALUE]..."


def parse_arguments(argv: Sequence[str]) -> tuple[str, dict[str, str]]:
    """``(payload path, {name: Katib string})`` from the command line.

    Example:
        >>> parse_arguments(["/app/objective.pkl", "--param", "x=1.5", "--param=opt=a=b"])
        ('/app/objective.pkl', {'x': '1.5', 'opt': 'a=b'})
    """
    path: str | None = None
    values: dict[str, str] = {}
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--param":
            if i + 1 >= len(args):
                raise SystemExit(f"--param needs NAME=VALUE\n{_USAGE}")
            item, i = args[i + 1], i + 2
        elif arg.startswith("--param="):
            item, i = arg[len("--param="):], i + 1
        elif path is None:
            path, i = arg, i + 1
            continue
        else:
            raise SystemExit(f"unexpected argument {arg!r}\n{_USAGE}")
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"--param {item!r}: expected NAME=VALUE\n{_USAGE}")
        values[name] = value
    if path is None:
        raise SystemExit(_USAGE)
    return path, values


def build_parameters(payload: dict[str, Any], values: dict[str, str]) -> dict[str, Any]:
    """The dict the objective receives: typed searched values, then the fixed ones."""
    types: dict[str, str] = payload.get("types") or {}
    choices: dict[str, dict[str, Any]] = payload.get("choices") or {}
    params: dict[str, Any] = {}
    for name, text in values.items():
        params[name] = to_python(types.get(name, "categorical"), text, choices.get(name))
    missing = [n for n in types if n not in params]
    if missing:
        raise SystemExit(f"no value given for parameter(s) {', '.join(missing)}\n{_USAGE}")
    params.update(payload.get("fixed") or {})
    return params


def report_result(result: Any, metric: str) -> None:
    """Report what the objective returned: a number as ``metric``, a dict as metrics, None as nothing."""
    if result is None:
        return
    if isinstance(result, dict):
        if result:
            report_metrics(result)
        return
    value = as_number(result)
    if value is None:
        raise TypeError(f"the objective returned {type(result).__name__} {result!r}; return a number (reported as "
                        f"{metric!r}), a dict of metrics, or None (and call report_metrics)")
    report_metrics({metric: value})


def main(argv: Sequence[str] | None = None) -> int:
    path, values = parse_arguments(sys.argv[1:] if argv is None else argv)
    payload = load_payload(path)
    objective = payload.get("objective")
    if objective is None:
        objective = import_reference(payload["reference"])
    params = build_parameters(payload, values)
    report_result(objective(params), payload["metric"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
