"""A worker keeps the cyclic collector off the request path: start-up frozen, young collections rarer, and
what exists at its first full collection frozen too (run in a fresh interpreter, not to touch the tests')."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import REPO

SCRIPT = """
import gc, json
from trimaran.serving.worker import GC_YOUNG_THRESHOLD, _tune_collector
_tune_collector()
at_start = gc.get_freeze_count()
threshold = gc.get_threshold()
made_after = [{"a": [i]} for i in range(5000)]  # what the first requests would create
gc.collect()
after_full = gc.get_freeze_count()
more = [{"b": [i]} for i in range(5000)]
gc.collect()
print(json.dumps({"at_start": at_start, "threshold": threshold, "young": GC_YOUNG_THRESHOLD,
                  "after_full": after_full, "after_second": gc.get_freeze_count()}))
"""


def test_start_up_and_the_first_full_collection_are_frozen_once() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, check=True)
    found = json.loads(out.stdout)
    assert found["at_start"] > 0
    assert found["threshold"][0] == found["young"]
    assert found["after_full"] >= found["at_start"] + 10_000, "the first full collection froze what it found"
    assert found["after_second"] == found["after_full"], "only once: later objects stay collectable"
