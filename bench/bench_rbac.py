"""What RBAC adds to a request: the API's authorisation step (`trimaran.server.rbac.access.authorize`,
the call every request of the Kubernetes API makes before it is served), timed in-process against a
store holding the bootstrap policy and ``--bindings`` RoleBindings (one user each, spread over
``--namespaces`` namespaces, half to ``view`` and half to ``edit``, with a Role each).

    .venv/bin/python bench/bench_rbac.py [--bindings 1000] [--namespaces 100] [--calls 200000]

Cases, each the median of 5 runs of ``--calls`` calls (µs per call):

1. ``repeat``: one user repeating one request (``list configmaps`` in its namespace): the decision cache.
2. ``by name``: one user, ``get configmaps/NAME`` with a new name each call: a decision never seen,
   from that user's compiled rules in that namespace.
3. ``many users``: every user in turn, each its own request: the caches as a busy server fills them.
4. ``denied``: a request refused (the 403 built, kube-apiserver's words).
5. ``after a change``: the first request after an RBAC object changed: the index rebuilt from the
   store (every Role, ClusterRole and binding listed), in ms — what a write to RBAC costs the next request.
6. ``token hook``: what authenticating a ``--role edit --namespace`` token costs more with RBAC (the
   check that its RoleBinding still exists), against the same authentication without the hook.

Goal (issue 25): < 0.2 ms added per request.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from trimaran.server.kube.errors import StatusError
from trimaran.server.rbac.access import authorize, start
from trimaran.server.rbac.authorizer import Attributes
from trimaran.server.tokens import Principal, TokenStore
from trimaran.store import open_store


def _per_call(fn, calls: int) -> float:  # noqa: ANN001
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        fn(calls)
        runs.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bindings", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench-rbac-"))
    try:
        store = open_store(home / "trimaran.db")
        tokens = TokenStore(home)
        authorizer = start(store, tokens)
        group = "rbac.authorization.k8s.io"
        for i in range(args.bindings):
            ns = f"ns-{i % args.namespaces}"
            store.create({"apiVersion": f"{group}/v1", "kind": "Role", "metadata": {"name": f"r{i}", "namespace": ns},
                          "rules": [{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}]})
            store.create({"apiVersion": f"{group}/v1", "kind": "RoleBinding",
                          "metadata": {"name": f"b{i}", "namespace": ns},
                          "roleRef": {"apiGroup": group, "kind": "ClusterRole", "name": ("view", "edit")[i % 2]},
                          "subjects": [{"kind": "User", "apiGroup": group, "name": f"user-{i}"}]})
        authorizer.changed()
        users = [Principal(f"user-{i}", ("system:authenticated",), authorizer=authorizer)
                 for i in range(args.bindings)]
        one = users[0]
        listing = Attributes("list", "", "configmaps", "", "ns-0")

        def repeat(n: int) -> None:
            for _ in range(n):
                authorize(one, listing)

        counter = iter(range(10**9))

        def by_name(n: int) -> None:
            for _ in range(n):
                authorize(one, Attributes("get", "", "configmaps", "", "ns-0", f"cm-{next(counter)}"))

        requests = [(u, Attributes("list", "", "pods", "", f"ns-{i % args.namespaces}")) for i, u in enumerate(users)]

        def many(n: int) -> None:
            for i in range(n):
                user, attrs = requests[i % len(requests)]
                authorize(user, attrs)

        refused = Attributes("delete", "", "nodes", "", "", "node-1")

        def denied(n: int) -> None:
            for _ in range(n):
                try:
                    authorize(one, refused)
                except StatusError:
                    pass

        rebuilds = []
        for _ in range(5):
            authorizer.changed()
            t0 = time.perf_counter()
            authorize(one, listing)
            rebuilds.append((time.perf_counter() - t0) * 1e3)
        token = tokens.create("edit", ["ns-1"])

        def authenticate(n: int) -> None:
            for _ in range(n):
                tokens.authenticate(token)

        with_hook = _per_call(authenticate, args.calls // 10)
        hook, tokens.on_user_token = tokens.on_user_token, None
        without_hook = _per_call(authenticate, args.calls // 10)
        tokens.on_user_token = hook
        roles = len(store.list("Role")) + len(store.list("ClusterRole"))
        bindings = len(store.list("RoleBinding")) + len(store.list("ClusterRoleBinding"))
        print(f"store: {roles} roles, {bindings} bindings; {args.calls} calls per run, median of 5 runs")
        print(f"repeat      {_per_call(repeat, args.calls):7.2f} µs/request")
        print(f"by name     {_per_call(by_name, args.calls):7.2f} µs/request")
        print(f"many users  {_per_call(many, args.calls):7.2f} µs/request")
        print(f"denied      {_per_call(denied, args.calls // 10):7.2f} µs/request")
        print(f"after a change {statistics.median(rebuilds):6.2f} ms (first request after an RBAC write)")
        print(f"token hook  {with_hook - without_hook:7.2f} µs/request "
              f"(authentication {without_hook:.2f} µs without it)")
        authorizer.stop()
        store.close()
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
