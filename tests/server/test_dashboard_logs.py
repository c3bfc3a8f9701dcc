"""The dashboard's log tail reads across the shim's rotations."""

from __future__ import annotations

from pathlib import Path

from trimaran.runtime import LocalRuntime
from trimaran.server.dashboard.logs import log_tail


def test_the_tail_reaches_back_into_the_rotated_file(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path / "home")
    directory = tmp_path / "home" / "logs" / "default" / "trainer" / "main"
    directory.mkdir(parents=True)
    (directory / "0.log.1").write_text("".join(f"epoch {i}\n" for i in range(100)))
    (directory / "0.log").write_text("epoch 100\n")  # just rotated
    assert log_tail(runtime, "default", "trainer", "main", lines=3) == "epoch 98\nepoch 99\nepoch 100"


def test_a_long_log_is_read_from_its_end_only(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path / "home")
    directory = tmp_path / "home" / "logs" / "default" / "trainer" / "main"
    directory.mkdir(parents=True)
    (directory / "0.log.1").write_text("x" * 1_000_000 + "\nearlier\n")
    (directory / "0.log").write_text("".join(f"line {i:06d}\n" for i in range(20_000)))
    tail = log_tail(runtime, "default", "trainer", "main", lines=100_000)
    assert tail is not None and tail.endswith("line 019999") and "earlier" not in tail
    assert not tail.startswith("line") or len(tail.splitlines()[0]) == len("line 000000")


def test_no_log_yet(tmp_path: Path) -> None:
    assert log_tail(LocalRuntime(tmp_path / "home"), "default", "nothing", "main") is None
