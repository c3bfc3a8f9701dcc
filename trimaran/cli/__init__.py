"""The kubectl-like command line."""

import importlib
import sys

# kubectl's connection flags, accepted before the verb as by the typer app.
_GLOBAL_OPTIONS = ("--kubeconfig", "--context")
# Verbs that parse their own arguments and start without typer and rich (about 0.3 s of imports):
# scripts call them in loops, and apply → wait → logs is how every job is started, awaited and read.
_OWN_PARSERS = {"apply": "trimaran.cli.apply", "delete": "trimaran.cli.delete", "get": "trimaran.cli.get",
                "logs": "trimaran.cli.logs", "wait": "trimaran.cli.wait"}


def _fast_verb(argv: list[str]) -> tuple[str, list[str], dict[str, str | None]] | None:
    """The module, its arguments and the connection flags when ``argv`` asks for one of
    :data:`_OWN_PARSERS`, else None."""
    connection: dict[str, str | None] = {"kubeconfig": None, "context": None}
    i = 0
    while i < len(argv):
        word = argv[i]
        option, eq, value = word.partition("=")
        if option not in _GLOBAL_OPTIONS:
            break
        if not eq:
            if i + 1 >= len(argv):
                return None
            value = argv[i + 1]
            i += 1
        connection[option[2:]] = value
        i += 1
    if i < len(argv) and argv[i] in _OWN_PARSERS:
        return _OWN_PARSERS[argv[i]], argv[i + 1:], connection
    return None


def main() -> None:
    fast = _fast_verb(sys.argv[1:])
    if fast is not None:
        module, args, connection = fast
        sys.exit(importlib.import_module(module).run(args, **connection))
    from trimaran.cli.app import main as run_app

    run_app()
