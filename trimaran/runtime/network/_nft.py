"""One nftables table per home, replaced whole in one transaction.

The Services' forwarding (`_proxy`) and the NetworkPolicies' filter (`_policy`) are parts of one
``table inet trimaran-<digest>``: `apply_table` sends ``table`` (so that a missing table is made
first), ``delete table`` and the new ``table`` to ``nft -f -`` together, so the kernel swaps the
old rules for the new ones atomically and a failed load leaves the old ones in place.
"""

from __future__ import annotations

import hashlib
import subprocess

__all__ = ["abandoned_tables", "apply_table", "delete_table", "list_table", "stale_tables", "table_exists",
           "table_name"]

_NFT = "nft"


def table_name(home: str) -> str:
    """The home's table, named by a digest of the home so two control planes never share one."""
    return "trimaran-" + hashlib.sha256(str(home).encode()).hexdigest()[:10]


def _run(script: str) -> None:
    result = subprocess.run([_NFT, "-f", "-"], input=script, text=True, capture_output=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"nft: {result.stderr.strip() or result.stdout.strip()}")


def apply_table(name: str, body: str, comment: str = "") -> None:
    """Replace ``table inet NAME`` by one holding ``body`` (chains, sets, maps) atomically; the
    ``comment`` says whose it is (see `stale_tables`)."""
    head = f'\tcomment "{comment}"\n' if comment else ""
    _run(f"table inet {name} {{}}\ndelete table inet {name}\ntable inet {name} {{\n{head}{body}}}\n")


def delete_table(name: str) -> None:
    """Remove the table if it is there."""
    _run(f"table inet {name} {{}}\ndelete table inet {name}\n")


def stale_tables(comment: str, keep: str) -> list[str]:
    """Our tables but ``keep`` whose comment is ``comment``: a home's address ranges are reserved
    machine-wide, so another table that claims them was left by a home that died without cleaning
    up, and its rules would catch the new home's traffic."""
    listed = subprocess.run([_NFT, "list", "tables", "inet"], capture_output=True, text=True, check=False).stdout
    names = [line.split()[-1] for line in listed.splitlines() if line.split()[-1:] != [keep]
             and line.split()[-1].startswith("trimaran-")]
    return [name for name in names if f'comment "{comment}"' in subprocess.run(
        [_NFT, "list", "table", "inet", name], capture_output=True, text=True, check=False).stdout]


def abandoned_tables(digest: str) -> list[str]:
    """The tables of the home whose digest (`home_digest`, 8 hex digits) is ``digest``: its egress
    NAT (``trimaran-nat-<digest>``) and its Services' and NetworkPolicies' table, named by a longer
    digest of the same home (`table_name`), so by this prefix."""
    listed = subprocess.run([_NFT, "list", "tables", "inet"], capture_output=True, text=True, check=False).stdout
    names = [line.split()[-1] for line in listed.splitlines() if line.split()]
    return [name for name in names
            if name == f"trimaran-nat-{digest}" or (name.startswith(f"trimaran-{digest}") and len(name) == 19)]


def table_exists(name: str) -> bool:
    return subprocess.run([_NFT, "list", "table", "inet", name], capture_output=True, check=False).returncode == 0


def list_table(name: str) -> str:
    return subprocess.run([_NFT, "list", "table", "inet", name], capture_output=True, text=True,
                          check=True).stdout
