"""A list read a page at a time (``list_page``): the pages together are the whole list, in order,
whatever filters choose, and a page reads about as many rows as it holds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from trimaran.store import SQLiteStore


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["metadata"].get("namespace") or "", obj["metadata"]["name"]


def _walk(store: SQLiteStore, kind: str, namespace: str | None, limit: int, **filters: Any) -> list[tuple[str, str]]:
    seen, after = [], None
    while True:
        page = store.list_page(kind, namespace, after=after, limit=limit, **filters)
        assert len(page.items) <= limit
        seen += [_key(o) for o in page.items]
        if not page.more:
            return seen
        assert page.items, "a page that says more follows holds something"
        after = _key(page.items[-1])


@pytest.fixture
def filled(store: SQLiteStore, obj: Callable[..., dict[str, Any]]) -> SQLiteStore:
    for ns in ("a", "b", "c"):
        for i in range(40):
            store.create(obj(f"j{i:02d}", namespace=ns, labels={"team": "x" if i % 3 else "y"}))
    store.create(obj("other", kind="TFJob", namespace="a"))
    return store


@pytest.mark.parametrize("limit", [1, 7, 40, 119, 120, 500])
def test_pages_together_are_the_whole_list(filled: SQLiteStore, limit: int) -> None:
    whole = [_key(o) for o in filled.list("PyTorchJob")]
    assert len(whole) == 120
    assert _walk(filled, "PyTorchJob", None, limit) == whole
    assert _walk(filled, "PyTorchJob", "b", limit) == [k for k in whole if k[0] == "b"]


@pytest.mark.parametrize("limit", [1, 5, 300])
def test_filters_choose_within_pages(filled: SQLiteStore, limit: int) -> None:
    ys = [_key(o) for o in filled.list("PyTorchJob", label_selector={"team": "y"})]
    assert len(ys) == 42
    assert _walk(filled, "PyTorchJob", None, limit, label_selector={"team": "y"}) == ys
    late = [k for k in ys if k[1] >= "j30"]
    assert _walk(filled, "PyTorchJob", None, limit, label_selector={"team": "y"},
                 accepts=lambda o: o["metadata"]["name"] >= "j30") == late
    assert _walk(filled, "PyTorchJob", None, limit, accepts=lambda o: False) == []


def test_remaining_is_counted_only_when_nothing_but_the_kind_chose(filled: SQLiteStore) -> None:
    page = filled.list_page("PyTorchJob", None, after=None, limit=50)
    assert page.more and page.remaining == 70
    page = filled.list_page("PyTorchJob", "c", after=("c", "j09"), limit=10)
    assert [_key(o) for o in page.items][0] == ("c", "j10") and page.remaining == 20
    assert filled.list_page("PyTorchJob", None, after=None, limit=5, label_selector={"team": "x"}).remaining is None
    last = filled.list_page("PyTorchJob", None, after=("c", "j38"), limit=5)
    assert not last.more and last.remaining is None and [_key(o) for o in last.items] == [("c", "j39")]


def test_cluster_scoped_objects_page_from_the_start(store: SQLiteStore) -> None:
    for name in ("n3", "n1", "n2"):
        store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    assert _walk(store, "Namespace", None, 1) == [("", "n1"), ("", "n2"), ("", "n3")]


def test_a_page_costs_its_page(filled: SQLiteStore, obj: Callable[..., dict[str, Any]]) -> None:
    """Counted in the statements the driver runs: a page of 10 out of a thousand reads one batch."""
    for i in range(1000):
        filled.create(obj(f"many{i:04d}", kind="ConfigMap", namespace="m"))
    fetched: list[int] = []
    real = filled._fetch

    def counting(prepared: Any, values: Any) -> list[Any]:
        rows = real(prepared, values)
        fetched.append(len(rows))
        return rows

    filled._fetch = counting  # type: ignore[method-assign]
    page = filled.list_page("ConfigMap", None, after=("m", "many0500"), limit=10)
    assert [_key(o)[1] for o in page.items] == [f"many{i:04d}" for i in range(501, 511)]
    assert fetched[0] < 1000 and sum(fetched[:-1]) <= 256 + 1  # the last statement is the count
    with pytest.raises(ValueError):
        filled.list_page("ConfigMap", None, after=None, limit=0)


def test_a_namespaces_page_from_a_position_in_another_namespace(filled: SQLiteStore) -> None:
    assert [_key(o) for o in filled.list_page("PyTorchJob", "b", after=("a", "j39"), limit=2).items] == \
        [("b", "j00"), ("b", "j01")]
    later = filled.list_page("PyTorchJob", "b", after=("c", "j00"), limit=2)
    assert later.items == [] and not later.more
