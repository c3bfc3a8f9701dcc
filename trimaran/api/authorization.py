"""The review kinds of ``authorization.k8s.io/v1`` and ``authentication.k8s.io/v1``: objects a
client creates to ask a question (may this user do that? who am I? is this token good?) and gets
back with the answer in ``status``; nothing is stored. ``server/rbac/reviews.py`` answers them; the
models describe them for OpenAPI (``kubectl explain selfsubjectaccessreview``)."""

from __future__ import annotations

from typing import NamedTuple

from pydantic import Field

from trimaran.api.meta import ApiModel, Resource

__all__ = ["AUTHN_GROUP", "AUTHZ_GROUP", "REVIEW_KINDS", "ReviewKind"]

AUTHZ_GROUP = "authorization.k8s.io"
AUTHN_GROUP = "authentication.k8s.io"


class ResourceAttributes(ApiModel):
    """The request asked about, for a resource: ``kubectl auth can-i VERB RESOURCE``."""

    namespace: str | None = None
    verb: str | None = None
    group: str | None = None
    version: str | None = None
    resource: str | None = None
    subresource: str | None = None
    name: str | None = None


class NonResourceAttributes(ApiModel):
    """The request asked about, for a path that is not a resource (``/healthz``)."""

    path: str | None = None
    verb: str | None = None


class SelfSubjectAccessReviewSpec(ApiModel):
    """One of the two attributes is given."""

    resource_attributes: ResourceAttributes | None = None
    non_resource_attributes: NonResourceAttributes | None = None


class SubjectAccessReviewSpec(SelfSubjectAccessReviewSpec):
    """Asks about another user: its name, groups and uid."""

    user: str | None = None
    groups: list[str] | None = None
    uid: str | None = None
    extra: dict[str, list[str]] | None = None


class SubjectAccessReviewStatus(ApiModel):
    """The answer: allowed, or denied, and why."""

    allowed: bool = False
    denied: bool | None = None
    reason: str | None = None
    evaluation_error: str | None = None


class SelfSubjectAccessReview(Resource):
    """May I do this? (``kubectl auth can-i``)"""

    spec: SelfSubjectAccessReviewSpec
    status: SubjectAccessReviewStatus | None = None


class SubjectAccessReview(Resource):
    """May that user do this, anywhere?"""

    spec: SubjectAccessReviewSpec
    status: SubjectAccessReviewStatus | None = None


class LocalSubjectAccessReview(Resource):
    """May that user do this in this namespace?"""

    spec: SubjectAccessReviewSpec
    status: SubjectAccessReviewStatus | None = None


class SelfSubjectRulesReviewSpec(ApiModel):
    """The namespace whose rules are listed."""

    namespace: str | None = None


class ResourceRule(ApiModel):
    """What may be done to resources."""

    verbs: list[str]
    api_groups: list[str] | None = None
    resources: list[str] | None = None
    resource_names: list[str] | None = None


class NonResourceRule(ApiModel):
    """What may be done to paths."""

    verbs: list[str]
    non_resource_urls: list[str] | None = Field(default=None, alias="nonResourceURLs")


class SubjectRulesReviewStatus(ApiModel):
    """Every rule that applies (``incomplete`` when some could not be evaluated)."""

    resource_rules: list[ResourceRule] = []
    non_resource_rules: list[NonResourceRule] = []
    incomplete: bool = False
    evaluation_error: str | None = None


class SelfSubjectRulesReview(Resource):
    """What may I do in this namespace? (``kubectl auth can-i --list``)"""

    spec: SelfSubjectRulesReviewSpec
    status: SubjectRulesReviewStatus | None = None


class UserInfo(ApiModel):
    """Who a token or a request authenticates as."""

    username: str | None = None
    uid: str | None = None
    groups: list[str] | None = None
    extra: dict[str, list[str]] | None = None


class SelfSubjectReviewStatus(ApiModel):
    """The user the request authenticated as."""

    user_info: UserInfo | None = None


class SelfSubjectReview(Resource):
    """Who am I? (``kubectl auth whoami``)"""

    status: SelfSubjectReviewStatus | None = None


class TokenReviewSpec(ApiModel):
    """The token to check, and the audiences it must be good for."""

    token: str | None = None
    audiences: list[str] | None = None


class TokenReviewStatus(ApiModel):
    """Whether the token authenticates, as whom, for which audiences."""

    authenticated: bool | None = None
    user: UserInfo | None = None
    audiences: list[str] | None = None
    error: str | None = None


class TokenReview(Resource):
    """Is this token good?"""

    spec: TokenReviewSpec
    status: TokenReviewStatus | None = None


class ReviewKind(NamedTuple):
    group: str
    plural: str
    kind: str
    namespaced: bool
    model: type[Resource]


REVIEW_KINDS = (
    ReviewKind(AUTHZ_GROUP, "localsubjectaccessreviews", "LocalSubjectAccessReview", True, LocalSubjectAccessReview),
    ReviewKind(AUTHZ_GROUP, "selfsubjectaccessreviews", "SelfSubjectAccessReview", False, SelfSubjectAccessReview),
    ReviewKind(AUTHZ_GROUP, "selfsubjectrulesreviews", "SelfSubjectRulesReview", False, SelfSubjectRulesReview),
    ReviewKind(AUTHZ_GROUP, "subjectaccessreviews", "SubjectAccessReview", False, SubjectAccessReview),
    ReviewKind(AUTHN_GROUP, "selfsubjectreviews", "SelfSubjectReview", False, SelfSubjectReview),
    ReviewKind(AUTHN_GROUP, "tokenreviews", "TokenReview", False, TokenReview),
)
