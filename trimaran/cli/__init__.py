"""The kubectl-like command line."""


def main() -> None:
    from trimaran.cli.app import main as run

    run()
