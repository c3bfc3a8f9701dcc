"""RBAC against a real control plane, through the real kubectl and the ``kubernetes`` Python client:
the bootstrap roles and their aggregation, refusals in kube-apiserver's words, bindings taking
effect at once, escalation prevention, ``auth can-i`` / ``whoami``, and ServiceAccount tokens."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import shared_plane
from tests.helpers import poll
from tests.server.sdk import run_client

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is installed by .ci/run (Debian's kubernetes-client)")

plane = shared_plane("rbac")


@pytest.fixture
def kubectl(plane, tmp_path):  # noqa: ANN001, ANN201
    env = dict(plane.env, KUBECONFIG=str(plane.home / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "kcache"),
               HOME=str(tmp_path))

    def run(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([KUBECTL, *args], env=env, input=input, capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    return run


def _user_token(plane, user: str, *extra: str) -> str:  # noqa: ANN001
    """A token of ``user`` with no role: only RBAC objects grant it anything."""
    return plane.cli("token", "create", "--role", "none", "--user", user, *extra).stdout.strip()


def test_bootstrap_roles_are_upstreams_and_printed_as_kubectl_prints_them(plane, kubectl) -> None:  # noqa: ANN001
    names = kubectl("get", "clusterroles", "-o", "name").stdout.split()
    for role in ("cluster-admin", "admin", "edit", "view", "system:basic-user", "system:discovery",
                 "system:public-info-viewer", "system:aggregate-to-view"):
        assert f"clusterrole.rbac.authorization.k8s.io/{role}" in names
    header = kubectl("get", "clusterrole", "cluster-admin").stdout.splitlines()[0].split()
    assert header == ["NAME", "CREATED", "AT"]
    wide = kubectl("get", "clusterrolebinding", "cluster-admin", "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]
    assert wide[1].split()[1] == "ClusterRole/cluster-admin" and "system:masters" in wide[1]
    binding = json.loads(kubectl("get", "clusterrolebinding", "system:public-info-viewer", "-o", "json").stdout)
    assert [s["name"] for s in binding["subjects"]] == ["system:authenticated", "system:unauthenticated"]

    # view takes in system:aggregate-to-view's rules; edit takes in view's; admin edit's.
    def rules(name: str) -> list[dict]:
        return json.loads(kubectl("get", "clusterrole", name, "-o", "json").stdout).get("rules") or []

    pods_read = {"verbs": ["get", "list", "watch"], "apiGroups": [""]}
    poll(lambda: any(r.items() >= pods_read.items() and "pods" in r["resources"] for r in rules("admin")),
         timeout=30, what="admin to aggregate view's rules through edit")
    assert not any("secrets" in r.get("resources", []) for r in rules("view"))
    assert any("secrets" in r.get("resources", []) and "create" in r["verbs"] for r in rules("edit"))
    assert not any("rolebindings" in r.get("resources", []) for r in rules("edit"))
    assert any("rolebindings" in r.get("resources", []) for r in rules("admin"))


def test_a_binding_grants_at_once_and_refusals_are_kube_apiservers(plane, kubectl) -> None:  # noqa: ANN001
    kubectl("create", "namespace", "rbac-a")
    alice = _user_token(plane, "alice", "--group", "team-a")
    denied = kubectl("--token", alice, "-n", "rbac-a", "get", "pods", check=False)
    assert denied.returncode == 1
    assert denied.stderr.strip() == ('Error from server (Forbidden): pods is forbidden: User "alice" cannot list '
                                     'resource "pods" in API group "" in the namespace "rbac-a"')
    named = kubectl("--token", alice, "-n", "rbac-a", "get", "deployment", "web", check=False)
    assert ('deployments.apps "web" is forbidden: User "alice" cannot get resource "deployments" in API group '
            '"apps" in the namespace "rbac-a"') in named.stderr
    assert kubectl("--token", alice, "auth", "can-i", "list", "pods", "-n", "rbac-a", check=False).stdout == "no\n"

    # No wait: the next request is decided by the binding just made.
    kubectl("-n", "rbac-a", "create", "rolebinding", "team-a-view", "--clusterrole=view", "--group=team-a")
    assert kubectl("--token", alice, "-n", "rbac-a", "get", "pods").returncode == 0
    can = kubectl("--token", alice, "auth", "can-i", "list", "pods", "-n", "rbac-a")
    assert can.stdout == "yes\n"
    cannot = kubectl("--token", alice, "auth", "can-i", "create", "pods", "-n", "rbac-a", check=False)
    assert (cannot.returncode, cannot.stdout) == (1, "no\n")
    assert kubectl("--token", alice, "auth", "can-i", "get", "secrets", "-n", "rbac-a", check=False).stdout == "no\n"
    assert kubectl("--token", alice, "auth", "can-i", "list", "pods", "-n", "default", check=False).stdout == "no\n"
    assert kubectl("--token", alice, "auth", "can-i", "get", "/version").stdout == "yes\n"
    # The admin asks as alice (impersonation): the binding names her group, not her.
    assert kubectl("auth", "can-i", "list", "pods", "-n", "rbac-a", "--as=alice", "--as-group=team-a").stdout == \
        "yes\n"
    assert kubectl("auth", "can-i", "list", "pods", "-n", "rbac-a", "--as=alice", check=False).stdout == "no\n"
    posing = kubectl("--token", alice, "get", "pods", "-n", "rbac-a", "--as=root", check=False)
    assert ('users "root" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the '
            'cluster scope') in posing.stderr
    listed = kubectl("--token", alice, "auth", "can-i", "--list", "-n", "rbac-a").stdout.splitlines()
    assert listed[0].split()[:4] == ["Resources", "Non-Resource", "URLs", "Resource"]
    assert any(line.split()[0] == "pods" and "[get list watch]" in line for line in listed)
    assert any(line.split()[0] == "selfsubjectaccessreviews.authorization.k8s.io" for line in listed)

    whoami = kubectl("--token", alice, "auth", "whoami").stdout.splitlines()
    assert whoami[1].split() == ["Username", "alice"]
    assert whoami[2].split() == ["Groups", "[team-a", "system:authenticated]"]
    me = json.loads(kubectl("auth", "whoami", "-o", "json").stdout)
    assert me["status"]["userInfo"]["username"] == "admin"
    assert "system:masters" in me["status"]["userInfo"]["groups"]

    kubectl("-n", "rbac-a", "delete", "rolebinding", "team-a-view")
    assert kubectl("--token", alice, "-n", "rbac-a", "get", "pods", check=False).returncode == 1


def test_escalation_is_refused_unless_held_or_escalate(plane, kubectl) -> None:  # noqa: ANN001
    kubectl("create", "namespace", "rbac-b")
    bob = _user_token(plane, "bob")
    kubectl("-n", "rbac-b", "create", "rolebinding", "bob-admin", "--clusterrole=admin", "--user=bob")
    # What bob holds he may grant.
    kubectl("--token", bob, "-n", "rbac-b", "create", "role", "cm-reader", "--verb=get", "--resource=configmaps")
    kubectl("--token", bob, "-n", "rbac-b", "create", "rolebinding", "carol-edit", "--clusterrole=edit",
            "--user=carol")
    refused = kubectl("--token", bob, "-n", "rbac-b", "create", "role", "grab", "--verb=get,list",
                      "--resource=nodes", check=False)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        'Error from server (Forbidden): roles.rbac.authorization.k8s.io "grab" is forbidden: user "bob" '
        '(groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:\n'
        '{APIGroups:[""], Resources:["nodes"], Verbs:["get" "list"]}')
    patched = kubectl("--token", bob, "-n", "rbac-b", "patch", "role", "cm-reader", "--type=json", "-p",
                      '[{"op": "add", "path": "/rules/-", "value": {"apiGroups": [""], "resources": ["nodes"], '
                      '"verbs": ["delete"]}}]', check=False)
    assert patched.returncode == 1 and '{APIGroups:[""], Resources:["nodes"], Verbs:["delete"]}' in patched.stderr
    bind = kubectl("--token", bob, "-n", "rbac-b", "create", "rolebinding", "grab", "--clusterrole=cluster-admin",
                   "--user=bob", check=False)
    assert bind.returncode == 1 and "is attempting to grant RBAC permissions not currently held" in bind.stderr
    assert 'rolebindings.rbac.authorization.k8s.io "grab" is forbidden' in bind.stderr
    assert kubectl("-n", "rbac-b", "get", "role,rolebinding", "-o", "name").stdout.split() == [
        "role.rbac.authorization.k8s.io/cm-reader", "rolebinding.rbac.authorization.k8s.io/bob-admin",
        "rolebinding.rbac.authorization.k8s.io/carol-edit"]
    # `bind` on the role lets him bind it without holding it, as upstream.
    kubectl("create", "clusterrole", "bind-cluster-admin", "--verb=bind", "--resource=clusterroles",
            "--resource-name=cluster-admin")
    kubectl("-n", "rbac-b", "create", "rolebinding", "bob-binds", "--clusterrole=bind-cluster-admin", "--user=bob")
    kubectl("--token", bob, "-n", "rbac-b", "create", "rolebinding", "grab", "--clusterrole=cluster-admin",
            "--user=bob")
    # A roleRef cannot change.
    patched = kubectl("-n", "rbac-b", "patch", "rolebinding", "carol-edit", "--type=merge",
                      "-p", '{"roleRef":{"name":"view"}}', check=False)
    assert patched.returncode == 1 and "cannot change roleRef" in patched.stderr


def test_service_account_tokens_and_token_request(plane, kubectl) -> None:  # noqa: ANN001
    kubectl("create", "namespace", "rbac-c")
    kubectl("-n", "rbac-c", "create", "serviceaccount", "robot")
    token = kubectl("-n", "rbac-c", "create", "token", "robot", "--duration=15m").stdout.strip()
    assert token.count(".") == 2
    who = json.loads(kubectl("--token", token, "auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    assert who == {"username": "system:serviceaccount:rbac-c:robot",
                   "groups": ["system:serviceaccounts", "system:serviceaccounts:rbac-c", "system:authenticated"]}
    denied = kubectl("--token", token, "-n", "rbac-c", "get", "configmaps", check=False)
    assert 'User "system:serviceaccount:rbac-c:robot" cannot list resource "configmaps"' in denied.stderr
    kubectl("-n", "rbac-c", "create", "rolebinding", "robot-edit", "--clusterrole=edit",
            "--serviceaccount=rbac-c:robot")
    kubectl("--token", token, "-n", "rbac-c", "create", "configmap", "made-by-robot")
    # A token dies with its ServiceAccount, even one of the same name made again.
    other = kubectl("-n", "rbac-c", "create", "token", "robot").stdout.strip()
    kubectl("-n", "rbac-c", "delete", "serviceaccount", "robot")
    kubectl("-n", "rbac-c", "create", "serviceaccount", "robot")
    gone = kubectl("--token", other, "-n", "rbac-c", "get", "configmaps", check=False)
    assert gone.returncode == 1 and "Unauthorized" in gone.stderr
    too_short = kubectl("-n", "rbac-c", "create", "token", "robot", "--duration=1m", check=False)
    assert "may not specify a duration less than 10 minutes" in too_short.stderr
    missing = kubectl("-n", "rbac-c", "create", "token", "nobody", check=False)
    assert 'serviceaccounts "nobody" not found' in missing.stderr
    # Every namespace's default ServiceAccount, which pods run as.
    default = kubectl("-n", "rbac-c", "create", "token", "default").stdout.strip()
    assert json.loads(kubectl("--token", default, "auth", "whoami", "-o", "json").stdout)["status"]["userInfo"][
        "username"] == "system:serviceaccount:rbac-c:default"
    # A pod's token is its ServiceAccount's, and a namespace's pods may edit it.
    from trimaran.server.tokens import TokenStore

    kubectl("create", "namespace", "rbac-d")
    pod_token = TokenStore(plane.home).service_account_token("rbac-d", "builder")
    who = json.loads(kubectl("--token", pod_token, "auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    assert who["username"] == "system:serviceaccount:rbac-d:builder"
    kubectl("--token", pod_token, "-n", "rbac-d", "create", "configmap", "made-in-a-pod")
    elsewhere = kubectl("--token", pod_token, "-n", "rbac-c", "create", "configmap", "x", check=False)
    assert elsewhere.returncode == 1 and "cannot create resource \"configmaps\"" in elsewhere.stderr
    assert kubectl("-n", "rbac-d", "get", "rolebinding", "trimaran:pods-edit", "-o", "wide").stdout.split()[-1] == \
        "system:serviceaccounts:rbac-d"
    # A token of a view user may not mint tokens.
    viewer = plane.cli("token", "create", "--role", "view", "--namespace", "rbac-c").stdout.strip()
    minted = kubectl("--token", viewer, "-n", "rbac-c", "create", "token", "robot", check=False)
    assert 'cannot create resource "serviceaccounts/token"' in minted.stderr


PYTHON_CLIENT = r'''
import json
from kubernetes import client, config

config.load_kube_config()
rbac, authz = client.RbacAuthorizationV1Api(), client.AuthorizationV1Api()
out = {}
# A ClusterRole labelled for view joins it: the aggregation controller adds its rules.
rbac.create_cluster_role(client.V1ClusterRole(
    metadata=client.V1ObjectMeta(name="podtemplate-reader",
                                 labels={"rbac.authorization.k8s.io/aggregate-to-view": "true"}),
    rules=[client.V1PolicyRule(api_groups=[""], resources=["podtemplates"], verbs=["get"])]))
rbac.create_namespaced_role_binding("default", client.V1RoleBinding(
    metadata=client.V1ObjectMeta(name="dave-view"),
    role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="view"),
    subjects=[client.RbacV1Subject(kind="User", name="dave", api_group="rbac.authorization.k8s.io")]))
out["bindings"] = [b.metadata.name for b in rbac.list_namespaced_role_binding("default").items]

def sar(verb, resource):
    review = authz.create_subject_access_review(client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user="dave", resource_attributes=client.V1ResourceAttributes(namespace="default", verb=verb,
                                                                      resource=resource))))
    return review.status.allowed, review.status.reason

out["dave_pods"] = sar("list", "pods")
out["dave_delete"] = sar("delete", "pods")
from kubernetes import watch
w = watch.Watch()
for event in w.stream(rbac.list_cluster_role, field_selector="metadata.name=view", timeout_seconds=60):
    if any("podtemplates" in (r.resources or []) for r in event["object"].rules or []):
        w.stop()
out["dave_podtemplates"] = sar("get", "podtemplates")
ssar = authz.create_self_subject_access_review(client.V1SelfSubjectAccessReview(
    spec=client.V1SelfSubjectAccessReviewSpec(non_resource_attributes=client.V1NonResourceAttributes(
        path="/metrics", verb="get"))))
out["me_metrics"] = ssar.status.allowed
print(json.dumps(out))
'''


def test_the_python_client(plane, tmp_path) -> None:  # noqa: ANN001
    out = run_client(sys.executable, plane, PYTHON_CLIENT, tmp_path)
    assert "dave-view" in out["bindings"]
    assert out["dave_pods"] == [True, 'RBAC: allowed by RoleBinding "dave-view/default" of ClusterRole "view" to '
                                      'User "dave"']
    assert out["dave_delete"] == [False, None]
    assert out["dave_podtemplates"][0] is True
    assert out["me_metrics"] is True


def test_a_role_token_keeps_its_role_when_its_namespace_is_made_again(plane, kubectl) -> None:  # noqa: ANN001
    token = plane.cli("token", "create", "--role", "edit", "--namespace", "rbac-e").stdout.strip()
    token_id = token.split("_")[1]
    kubectl("create", "namespace", "rbac-e")
    kubectl("--token", token, "-n", "rbac-e", "create", "configmap", "first")
    kubectl("delete", "namespace", "rbac-e")  # waits until it is gone, its RoleBindings with it
    kubectl("create", "namespace", "rbac-e")
    assert kubectl("-n", "rbac-e", "get", "rolebindings", "-o", "name").stdout == ""
    kubectl("--token", token, "-n", "rbac-e", "create", "configmap", "second")
    binding = json.loads(kubectl("-n", "rbac-e", "get", "rolebinding", f"trimaran:token:{token_id}", "-o",
                                 "json").stdout)
    assert binding["roleRef"]["name"] == "edit" and binding["metadata"]["labels"] == {"trimaran.io/token": token_id}
    # Revoked, the token is refused, and its bindings are gone (the token file is read again by the
    # next request the control plane authenticates).
    plane.cli("token", "revoke", token_id)
    assert kubectl("--token", token, "-n", "rbac-e", "get", "configmaps", check=False).returncode == 1
    assert kubectl("-n", "rbac-e", "get", "rolebindings", "-o", "name").stdout == ""


def test_rules_match_as_upstreams_rule_allows() -> None:
    from trimaran.server.rbac.authorizer import Attributes, compile_rule

    scale = compile_rule({"verbs": ["get", "update"], "apiGroups": ["*"], "resources": ["*/scale"]})
    assert scale.allows(Attributes("update", "apps", "deployments", "scale", "ns", "web"))
    assert not scale.allows(Attributes("update", "apps", "deployments", "", "ns", "web"))
    assert not scale.allows(Attributes("delete", "apps", "deployments", "scale", "ns", "web"))
    named = compile_rule({"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"]})
    assert named.allows(Attributes("get", "", "configmaps", "", "ns", "a"))
    assert not named.allows(Attributes("get", "", "configmaps", "", "ns", "b"))
    assert not named.allows(Attributes("list", "", "configmaps", "", "ns"))
    logs = compile_rule({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/log"]})
    assert logs.allows(Attributes("get", "", "pods", "log", "ns", "p"))
    assert not logs.allows(Attributes("get", "", "pods", "", "ns", "p"))
    urls = compile_rule({"verbs": ["get"], "nonResourceURLs": ["/apis/*", "/version"]})
    assert urls.allows(Attributes("get", path="/apis/apps/v1")) and urls.allows(Attributes("get", path="/version"))
    assert not urls.allows(Attributes("get", path="/version/x")) and not urls.allows(Attributes("get", "", "pods"))


def test_what_an_escalation_lacks_is_listed_as_upstream_compacts_it() -> None:
    from trimaran.server.rbac.authorizer import compile_rule
    from trimaran.server.rbac.escalation import missing_rules

    held = [compile_rule({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "configmaps"]}),
            compile_rule({"verbs": ["*"], "apiGroups": ["apps"], "resources": ["deployments/scale"]})]
    assert missing_rules(held, [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]) == []
    assert missing_rules(held, [{"verbs": ["get", "delete", "create"], "apiGroups": ["", "apps"],
                                 "resources": ["pods", "deployments/scale"]}]) == [
        '{APIGroups:[""], Resources:["deployments/scale"], Verbs:["get" "delete" "create"]}',
        '{APIGroups:[""], Resources:["pods"], Verbs:["delete" "create"]}',
        '{APIGroups:["apps"], Resources:["pods"], Verbs:["get" "delete" "create"]}']
    # A wildcard is held only by a wildcard; a name by a rule for it or for every name.
    assert missing_rules(held, [{"verbs": ["get"], "apiGroups": [""], "resources": ["*"]}]) == [
        '{APIGroups:[""], Resources:["*"], Verbs:["get"]}']
    assert missing_rules(held, [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"],
                                 "resourceNames": ["p"]}]) == []
    assert missing_rules(held, [{"verbs": ["get"], "nonResourceURLs": ["/metrics"]}]) == [
        '{NonResourceURLs:["/metrics"], Verbs:["get"]}']
