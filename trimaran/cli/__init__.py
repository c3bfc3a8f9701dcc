"""The kubectl-like command line."""

import sys

# kubectl's connection flags, accepted before the verb as by the typer app.
_GLOBAL_OPTIONS = ("--kubeconfig", "--context")


def _fast_get(argv: list[str]) -> tuple[list[str], dict[str, str | None]] | None:
    """``get``'s arguments and the connection flags when ``argv`` asks for ``get``, else None."""
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
    if i < len(argv) and argv[i] == "get":
        return argv[i + 1:], connection
    return None


def main() -> None:
    # `get` starts without typer and rich (about 0.2 s of imports): scripts call it in loops.
    fast = _fast_get(sys.argv[1:])
    if fast is not None:
        from trimaran.cli.get import run

        args, connection = fast
        sys.exit(run(args, **connection))
    from trimaran.cli.app import main as run_app

    run_app()
