"""RBAC (rbac.authorization.k8s.io/v1) as kube-apiserver authorises with it.

- ``authorizer``: rules, the index of bindings by subject, decisions cached until RBAC objects change.
- ``policy`` and ``bootstrap``: the default roles and bindings; each token's bindings.
- ``access``: the API's hooks: authorise a request (403 in kube-apiserver's words), escalation
  prevention on writes of roles and bindings, and `start`, which wires it all to a control plane.
- ``escalation``: what a role or binding grants that its writer lacks.
- ``reviews``: SelfSubjectAccessReview, SelfSubjectRulesReview, SubjectAccessReview,
  LocalSubjectAccessReview, SelfSubjectReview; ``serviceaccounts``: TokenRequest.
- ``aggregation``: the controller that fills aggregated ClusterRoles.

Modules import each other directly (this package imports nothing), as ``server.tokens`` needs the
authorizer's types while ``access`` needs the API's errors.
"""
