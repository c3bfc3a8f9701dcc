"""The GJSON subset of step conditions: what exists, what does not, and what is refused at parse."""

from __future__ import annotations

import pytest

from trimaran.serving.graph.gjson import PathError, exists, parse

DOC = {"predictions": [1, 0], "instances": [[5.1, 3.5]], "a.b": 2, "items": [{"x": 1, "n": "cat"}, {"x": 5}]}


@pytest.mark.parametrize(("path", "found"), [
    ("predictions", True), ("predictions.0", True), ("predictions.2", False), ("instances.0.0", True),
    ("missing", False), ("a\\.b", True), ("items.#", True), ("items.#.x", True),
    ("items.#(x>2)", True), ("items.#(x>9)", False), ("items.#(n%\"c*\")", True),
    ("items.#(x!=1)", True), ("items.#(n!=\"cat\")", False),
    ("[@this].#(predictions.0==1)", True), ("[@this].#(predictions.0==0)", False), ("@this", True),
])
def test_exists(path: str, found: bool) -> None:
    assert exists(parse(path), DOC) is found


@pytest.mark.parametrize("path", ["", "items.#(x>", "a..b", "@reverse", "items.#(x==cat)"])
def test_refused(path: str) -> None:
    with pytest.raises(PathError):
        parse(path)
