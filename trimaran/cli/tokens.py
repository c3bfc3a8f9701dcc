"""``trimaran token``: tokens for other people and programs: each names a user (and its groups),
which ``--role`` binds to the default ClusterRole of that name in some namespaces or all (what
else the user may do is what RBAC objects made with kubectl grant it).

Tokens are written to the home's token file directly (the control plane re-reads it), so making one
needs this machine's account of the home, as reading the kubeconfig does.
"""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trimaran.cli.tables import print_table
from trimaran.server.daemon import home_dir
from trimaran.server.tokens import ROLES, TokenStore

token_app = typer.Typer(no_args_is_help=True, help="Make, list and revoke API tokens (scoped to namespaces).")
console = Console()


@token_app.command("create")
def create(
    namespace: list[str] = typer.Option(None, "--namespace", "-n",
                                        help="A namespace the token may use (repeat for more); none: all."),
    role: str = typer.Option("edit", "--role", help="view (read, but not Secrets), edit (read and write), admin, "
                                                    "or none (only what RoleBindings of its user grant)."),
    name: str | None = typer.Option(None, "--name", help="A label shown by `trimaran token list`."),
    user: str | None = typer.Option(None, "--user", help="The user it authenticates as (default: its name)."),
    group: list[str] = typer.Option(None, "--group", help="A group the user is in (repeat for more)."),
) -> None:
    """Print a new token; only its hash is kept, so copy it now."""
    if role not in (*ROLES, "none"):
        console.print(f"[red]error:[/red] --role must be one of {', '.join(ROLES)}, none, not {escape(repr(role))}",
                      highlight=False)
        raise typer.Exit(1)
    token = TokenStore(home_dir()).create(None if role == "none" else role, namespace or None, name=name, user=user,
                                          groups=group or None)
    typer.echo(token)


@token_app.command("list")
def list_tokens() -> None:
    """Every token's id, name, user, groups, role and namespaces (never the token itself)."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    for title in ("ID", "NAME", "USER", "GROUPS", "ROLE", "NAMESPACES"):
        table.add_column(title, no_wrap=True)
    for entry in TokenStore(home_dir()).list():
        table.add_row(entry["id"], entry["name"], entry.get("user") or entry["name"],
                      ",".join(entry.get("groups") or []) or "-", entry["role"] or "none",
                      ",".join(entry["namespaces"] or ["*"]))
    print_table(console, table)


@token_app.command("revoke")
def revoke(token_id: str = typer.Argument(..., help="The ID `trimaran token list` shows.")) -> None:
    """Forget a token: requests carrying it are refused from now on."""
    if not TokenStore(home_dir()).revoke(token_id):
        console.print(f"[red]error:[/red] no token with id {escape(repr(token_id))}", highlight=False)
        raise typer.Exit(1)
    typer.echo(f"token {token_id} revoked")
