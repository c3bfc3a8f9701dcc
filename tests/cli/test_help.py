"""`trimaran` with no command: the help ends with examples that run as printed from the checkout."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO


def test_no_command_shows_real_examples() -> None:
    proc = subprocess.run([sys.executable, "-m", "trimaran.cli"], capture_output=True, text=True, cwd=REPO,
                          timeout=60)
    out = proc.stdout + proc.stderr
    tail = out[out.index("Examples:"):]
    commands = [line.strip(" │") for line in tail.splitlines() if line.strip(" │").startswith("trimaran ")]
    assert len(commands) >= 5, tail
    assert "trimaran apply -f examples/pytorch-ddp/" in commands
    for command in commands:
        for word in command.split():
            if word.startswith("examples/"):
                assert (REPO / word).exists(), f"{command}: {word} does not exist"
