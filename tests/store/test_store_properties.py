"""A property test: any interleaving of writes, from fresh or stale reads, behaves like a simple model.

The model is what Kubernetes promises: a conditional write succeeds exactly when the
resourceVersion it carries is the stored one; generation counts spec changes; update and
update_status each change only their half; every change is one watch event, in order.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from trimaran.store import AlreadyExists, Conflict, NotFound, SQLiteStore

NAMES = st.sampled_from(["a", "b", "c"])
REPLICAS = st.integers(min_value=1, max_value=3)
PHASES = st.sampled_from(["Pending", "Running", "Succeeded"])


class StoreMachine(RuleBasedStateMachine):
    reads = Bundle("reads")

    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="trimaran-store-")
        self.store = SQLiteStore(Path(self.directory) / "t.db")
        self.model: dict[str, dict[str, Any]] = {}  # name -> the object the store should hold
        self.changes: list[tuple[str, str, str]] = []  # (type, name, resourceVersion) per real change

    def teardown(self) -> None:
        try:
            replay = [
                (e.type, e.object["metadata"]["name"], e.object["metadata"]["resourceVersion"])
                for e in self.store.watch(since=0, timeout=0)
            ]
            assert replay == self.changes
        finally:
            self.store.close()
            shutil.rmtree(self.directory)

    def _request(self, read: dict[str, Any], conditional: bool) -> dict[str, Any]:
        request = copy.deepcopy(read)
        if not conditional:
            request["metadata"].pop("resourceVersion", None)
        return request

    def _expect_stale(self, name: str, request: dict[str, Any]) -> type[Exception] | None:
        if name not in self.model:
            return NotFound
        sent = request["metadata"].get("resourceVersion")
        if sent is not None and sent != self.model[name]["metadata"]["resourceVersion"]:
            return Conflict
        return None

    def _record(self, type: str, result: dict[str, Any]) -> None:
        self.changes.append((type, result["metadata"]["name"], result["metadata"]["resourceVersion"]))

    @rule(target=reads, name=NAMES, replicas=REPLICAS)
    def create(self, name: str, replicas: int) -> dict[str, Any]:
        obj = {"apiVersion": "v1", "kind": "Job", "metadata": {"name": name, "namespace": "ns"},
               "spec": {"r": replicas}}
        if name in self.model:
            with pytest.raises(AlreadyExists):
                self.store.create(obj)
            return self.model[name]
        created = self.store.create(obj)
        assert created["metadata"]["generation"] == 1
        self.model[name] = created
        self._record("ADDED", created)
        return created

    @rule(target=reads, name=NAMES)
    def read(self, name: str) -> dict[str, Any]:
        if name not in self.model:
            with pytest.raises(NotFound):
                self.store.get("Job", "ns", name)
            return {"apiVersion": "v1", "kind": "Job", "metadata": {"name": name, "namespace": "ns"}, "spec": {}}
        return self.store.get("Job", "ns", name)

    @rule(read=reads, replicas=REPLICAS, phase=PHASES, conditional=st.booleans())
    def update(self, read: dict[str, Any], replicas: int, phase: str, conditional: bool) -> None:
        name = read["metadata"]["name"]
        request = self._request(read, conditional)
        request["spec"] = {"r": replicas}
        request["status"] = {"phase": phase}  # must be ignored
        expected_error = self._expect_stale(name, request)
        if expected_error:
            with pytest.raises(expected_error):
                self.store.update(request)
            return
        before = self.model[name]
        result = self.store.update(request)
        changed = before["spec"] != request["spec"]
        assert result["metadata"]["generation"] == before["metadata"]["generation"] + changed
        assert result.get("status") == before.get("status")
        assert result["spec"] == request["spec"]
        assert (result["metadata"]["resourceVersion"] != before["metadata"]["resourceVersion"]) == changed
        if changed:
            self._record("MODIFIED", result)
        self.model[name] = result

    @rule(read=reads, phase=PHASES, conditional=st.booleans())
    def update_status(self, read: dict[str, Any], phase: str, conditional: bool) -> None:
        name = read["metadata"]["name"]
        request = self._request(read, conditional)
        request["status"] = {"phase": phase}
        request["spec"] = {"r": 99}  # must be ignored
        expected_error = self._expect_stale(name, request)
        if expected_error:
            with pytest.raises(expected_error):
                self.store.update_status(request)
            return
        before = self.model[name]
        result = self.store.update_status(request)
        changed = before.get("status") != request["status"]
        assert result["spec"] == before["spec"]
        assert result["metadata"]["generation"] == before["metadata"]["generation"]
        assert result["status"] == request["status"]
        if changed:
            self._record("MODIFIED", result)
        self.model[name] = result

    @rule(name=NAMES)
    def delete(self, name: str) -> None:
        if name not in self.model:
            with pytest.raises(NotFound):
                self.store.delete("Job", "ns", name)
            return
        deleted = self.store.delete("Job", "ns", name)
        assert deleted["metadata"]["uid"] == self.model.pop(name)["metadata"]["uid"]
        self._record("DELETED", deleted)

    @invariant()
    def store_matches_model(self) -> None:
        assert self.store.list("Job") == [self.model[name] for name in sorted(self.model)]
        assert self.store.current_revision() == len(self.changes)


StoreMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStoreProperties = StoreMachine.TestCase
