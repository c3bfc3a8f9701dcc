"""Each operator's label key is written once, in ``trimaran/api/labels.py``: a key spelled out
anywhere else in the package drifts from it sooner or later."""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

from trimaran.api import labels

ROOT = Path(labels.__file__).resolve().parent.parent
KEYS = {getattr(labels, name): name for name in labels.__all__}


def _spelled_out(path: Path, root: Path = ROOT) -> list[str]:
    found = []
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        key = token.string.strip("\"'") if token.type == tokenize.STRING else None
        if key in KEYS:
            found.append(f"{path.relative_to(root)}:{token.start[0]} spells out {KEYS[key]}")
    return found


def test_every_label_key_is_written_once() -> None:
    own = Path(labels.__file__).resolve()
    files = [p for p in sorted(ROOT.rglob("*.py")) if p.resolve() != own]
    assert len(files) > 100  # the scan sees the package
    found = [line for path in files for line in _spelled_out(path)]
    assert found == [], "\n".join(found)


def test_the_scan_sees_a_key_spelled_out(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('LABELS = {"training.kubeflow.org/replica-type": "worker"}\n')
    assert _spelled_out(module, tmp_path) == ["m.py:1 spells out REPLICA_TYPE_LABEL"]
