"""apiregistration.k8s.io/v1 APIService: which server answers a group version. Trimaran answers every
group it serves itself (``spec.service`` unset: Local); the list is kept by
`trimaran.controllers.apiservices` from what discovery lists. Validated as kube-aggregator's
``ValidateAPIService``; its columns are kube-aggregator's table."""

# Annotations are evaluated eagerly (no `from __future__ import annotations`), as in apps.py.

from pydantic import Field

from trimaran.api.errors import FieldError
from trimaran.api.meta import ApiModel, Condition, Int32, Resource, is_dns1035_label, is_dns1123_subdomain
from trimaran.api.printers import AGE, PrinterColumn

__all__ = ["API_VERSION", "APISERVICE_COLUMNS", "AUTOMANAGED_LABEL", "APIService", "apiservice_name"]

API_VERSION = "apiregistration.k8s.io/v1"
#: kube-aggregator's autoregister label: ``onstart`` for the server's own groups, ``true`` for CRDs'.
AUTOMANAGED_LABEL = "kube-aggregator.kubernetes.io/automanaged"
_DEFAULT_SERVICE_PORT = 443


def apiservice_name(group: str, version: str) -> str:
    """``<version>.<group>``: ``v1.`` for the core group, ``v1.apps``."""
    return f"{version}.{group}"


class ServiceReference(ApiModel):
    namespace: str | None = None
    name: str | None = None
    port: Int32 | None = None


class APIServiceSpec(ApiModel):
    service: ServiceReference | None = None
    group: str = ""
    version: str = ""
    insecure_skip_tls_verify: bool | None = Field(default=None, alias="insecureSkipTLSVerify")
    ca_bundle: str | None = None
    group_priority_minimum: Int32 = 0
    version_priority: Int32 = 0


class APIServiceStatus(ApiModel):
    conditions: list[Condition] | None = None


class APIService(Resource):
    """apiregistration.k8s.io/v1 APIService (cluster-scoped)."""

    spec: APIServiceSpec | None = None
    status: APIServiceStatus | None = None

    @classmethod
    def name_errors(cls, name: str) -> list[str]:
        """A path segment (``IsValidPathSegmentName``): ``v1.`` names the core group's."""
        if name in (".", ".."):
            return [f'may not be \'{name}\'']
        return [f"may not contain '{c}'" for c in ("/", "%") if c in name]

    def set_defaults(self) -> None:
        """A service reference's port is 443 (``SetDefaults_ServiceReference``)."""
        if self.spec is None:
            self.spec = APIServiceSpec()
        if self.spec.service is not None and self.spec.service.port is None:
            self.spec.service.port = _DEFAULT_SERVICE_PORT

    def check(self) -> list[FieldError]:
        errs = super().check()
        spec = self.spec or APIServiceSpec()
        required = apiservice_name(spec.group, spec.version)
        name = self.metadata.name or ""
        if name and name != required:
            errs.append(FieldError.invalid("metadata.name", name,
                                           f'must be `spec.version+"."+spec.group`: "{required}"'))
        if not spec.group and spec.version != "v1":
            errs.append(FieldError.required("spec.group",
                                            "only v1 may have an empty group and it better be legacy kube"))
        if spec.group:
            errs += [FieldError.invalid("spec.group", spec.group, m) for m in is_dns1123_subdomain(spec.group)]
        errs += [FieldError.invalid("spec.version", spec.version, m) for m in is_dns1035_label(spec.version)]
        if not 0 < spec.group_priority_minimum <= 20000:
            errs.append(FieldError.invalid("spec.groupPriorityMinimum", spec.group_priority_minimum,
                                           "must be positive and less than 20000"))
        if not 0 < spec.version_priority <= 1000:
            errs.append(FieldError.invalid("spec.versionPriority", spec.version_priority,
                                           "must be positive and less than 1000"))
        if spec.service is None:
            if spec.ca_bundle:
                errs.append(FieldError.invalid("spec.caBundle", f"{len(spec.ca_bundle) * 3 // 4} bytes",
                                               "local APIServices may not have a caBundle"))
            if spec.insecure_skip_tls_verify:
                errs.append(FieldError.invalid("spec.insecureSkipTLSVerify", True,
                                               "local APIServices may not have insecureSkipTLSVerify"))
            return errs
        if not spec.service.namespace:
            errs.append(FieldError.required("spec.service.namespace"))
        if not spec.service.name:
            errs.append(FieldError.required("spec.service.name"))
        port = spec.service.port or 0
        if not 1 <= port <= 65535:
            errs.append(FieldError.invalid("spec.service.port", port,
                                           "port is not valid: must be between 1 and 65535, inclusive"))
        if spec.insecure_skip_tls_verify and spec.ca_bundle:
            errs.append(FieldError.invalid("spec.insecureSkipTLSVerify", True,
                                           "may not be true if caBundle is present"))
        return errs


def _service(obj: dict) -> str:
    service = (obj.get("spec") or {}).get("service")
    return f"{service.get('namespace', '')}/{service.get('name', '')}" if service else "Local"


def _available(obj: dict) -> str:
    """The Available condition: ``True``, ``False (Reason)``, or ``Unknown`` when there is none."""
    condition = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == "Available"),
                     None)
    if condition is None:
        return "Unknown"
    if condition.get("status") != "True" and condition.get("reason"):
        return f"{condition['status']} ({condition['reason']})"
    return str(condition.get("status"))


# kube-aggregator's ConvertToTable.
APISERVICE_COLUMNS = (PrinterColumn("Service", value=_service), PrinterColumn("Available", value=_available), AGE)
