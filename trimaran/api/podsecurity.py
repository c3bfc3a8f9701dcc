"""Pod Security Admission: Kubernetes' Pod Security Standards, judged as kube-apiserver judges them.

A namespace chooses a level per mode with labels (``pod-security.kubernetes.io/enforce: baseline``,
``.../warn: restricted``, ``.../audit``, each with an optional ``-version``); an unlabelled mode gets
the server's default. `evaluate` runs the checks of a level on one pod's metadata and spec (plain
manifest dicts) and returns upstream's reasons and details, in upstream's words, so that a refusal
reads ``violates PodSecurity "baseline:latest": hostPath volumes (volume "data"), privileged
(container "c" must not set securityContext.privileged=true)``.

Every version label is accepted (``latest`` or ``v1.N``) and echoed in messages; the checks are
those of the latest version whatever it names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from trimaran.api.errors import FieldError, join_path

__all__ = [
    "LEVELS",
    "LevelVersion",
    "Policy",
    "Violation",
    "evaluate",
    "forbidden_detail",
    "judge",
    "label_errors",
    "policy_for",
]

PRIVILEGED, BASELINE, RESTRICTED = "privileged", "baseline", "restricted"
LEVELS = (PRIVILEGED, BASELINE, RESTRICTED)
MODES = ("enforce", "audit", "warn")
LABEL_PREFIX = "pod-security.kubernetes.io/"
_VERSION_ERROR = 'must be "latest" or "v1.x"'


@dataclass(frozen=True)
class LevelVersion:
    level: str
    version: str = "latest"

    def __str__(self) -> str:
        return f"{self.level}:{self.version}"


@dataclass(frozen=True)
class Policy:
    """The level each mode applies to pods of one namespace."""

    enforce: LevelVersion
    audit: LevelVersion
    warn: LevelVersion

    @classmethod
    def default(cls, enforce: str) -> Policy:
        """The policy of an unlabelled namespace: ``enforce`` refused, nothing warned or audited."""
        return cls(LevelVersion(enforce), LevelVersion(PRIVILEGED), LevelVersion(PRIVILEGED))

    @property
    def privileged(self) -> bool:
        return all(lv.level == PRIVILEGED for lv in (self.enforce, self.audit, self.warn))


def _valid_version(version: str) -> bool:
    if version == "latest":
        return True
    major, _, minor = version.partition(".")
    return major == "v1" and minor.isdigit() and (minor == "0" or not minor.startswith("0"))


def label_errors(labels: Mapping[str, str] | None) -> list[FieldError]:
    """Bad values of the pod-security labels, as upstream's namespace admission words them."""
    errs: list[FieldError] = []
    for mode in MODES:
        key = LABEL_PREFIX + mode
        level = (labels or {}).get(key)
        if level is not None and level not in LEVELS:
            errs.append(FieldError.invalid(join_path("metadata", "labels", key), level,
                                           "must be one of " + ", ".join(LEVELS)))
        version = (labels or {}).get(key + "-version")
        if version is not None and not _valid_version(version):
            errs.append(FieldError.invalid(join_path("metadata", "labels", key + "-version"), version,
                                           _VERSION_ERROR))
    return errs


def policy_for(labels: Mapping[str, str] | None, default: Policy) -> Policy:
    """The namespace's policy: its labels over ``default``. A bad enforce level enforces
    restricted; a bad audit or warn level turns that mode off (upstream fails closed and open so)."""
    labels = labels or {}
    chosen: dict[str, LevelVersion] = {}
    for mode in MODES:
        fallback: LevelVersion = getattr(default, mode)
        level = labels.get(LABEL_PREFIX + mode, fallback.level)
        if level not in LEVELS:
            level = RESTRICTED if mode == "enforce" else PRIVILEGED
        version = labels.get(LABEL_PREFIX + mode + "-version", fallback.version)
        chosen[mode] = LevelVersion(level, version if _valid_version(version) else "latest")
    return Policy(**chosen)


# --- the checks -------------------------------------------------------------------------------

Violation = tuple[str, str]  # (reason, detail), as upstream's CheckResult


def _quote(items: list[str]) -> str:
    return ", ".join(f'"{item}"' for item in items)


def _plural(one: str, many: str, count: int) -> str:
    return one if count == 1 else many


def _containers(spec: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(field) or []:
            if isinstance(container, dict):
                yield container


def _context(owner: Mapping[str, Any]) -> dict[str, Any]:
    context = owner.get("securityContext")
    return context if isinstance(context, dict) else {}


def _sub(mapping: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = mapping.get(key)
    return value if isinstance(value, dict) else {}


def _setters(pod_bad: bool, containers: list[str]) -> str:
    """``pod and containers "a", "b"``: who set a forbidden value."""
    parts = ["pod"] if pod_bad else []
    if containers:
        parts.append(f"{_plural('container', 'containers', len(containers))} {_quote(containers)}")
    return " and ".join(parts)


def _containers_setting(spec: Mapping[str, Any], bad: Callable[[dict[str, Any]], bool]) -> list[str]:
    return [str(c.get("name", "")) for c in _containers(spec) if bad(_context(c))]


def _allow_privilege_escalation(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    bad = _containers_setting(spec, lambda sc: sc.get("allowPrivilegeEscalation") is not False)
    if bad:
        return ("allowPrivilegeEscalation != false", f"{_plural('container', 'containers', len(bad))} {_quote(bad)} "
                "must set securityContext.allowPrivilegeEscalation=false")
    return None


def _apparmor(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    def bad_type(context: Mapping[str, Any]) -> str | None:
        profile = context.get("appArmorProfile")
        if isinstance(profile, dict) and profile.get("type") not in ("RuntimeDefault", "Localhost"):
            return str(profile.get("type") or "")
        return None

    values: set[str] = set()
    pod_bad = bad_type(_context(spec))
    if pod_bad is not None:
        values.add(pod_bad)
    containers = []
    for c in _containers(spec):
        value = bad_type(_context(c))
        if value is not None:
            containers.append(str(c.get("name", "")))
            values.add(value)
    prefix = "container.apparmor.security.beta.kubernetes.io/"
    annotations = sorted(f'{k}="{v}"' for k, v in (meta.get("annotations") or {}).items()
                         if k.startswith(prefix) and v and v != "runtime/default"
                         and not str(v).startswith("localhost/"))
    setters = _setters(pod_bad is not None, containers)
    if annotations:
        setters = " and ".join(filter(None, [setters, _plural("annotation", "annotations", len(annotations))]))
    if not setters:
        return None
    shown = sorted(values) + annotations
    return (_plural("forbidden AppArmor profile", "forbidden AppArmor profiles", len(shown)),
            f"{setters} must not set AppArmor profile type to {_quote(shown)}")


_BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})


def _added(context: Mapping[str, Any]) -> list[str]:
    return [str(c) for c in _sub(context, "capabilities").get("add") or []]


def _capabilities_baseline(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    containers, extra = [], set()
    for c in _containers(spec):
        beyond = [cap for cap in _added(_context(c)) if cap not in _BASELINE_CAPABILITIES]
        if beyond:
            containers.append(str(c.get("name", "")))
            extra.update(beyond)
    if containers:
        return ("non-default capabilities", f"{_plural('container', 'containers', len(containers))} "
                f"{_quote(containers)} must not include {_quote(sorted(extra))} in securityContext.capabilities.add")
    return None


def _capabilities_restricted(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    no_drop_all, adding, extra = [], [], set()
    for c in _containers(spec):
        context, name = _context(c), str(c.get("name", ""))
        if "ALL" not in (_sub(context, "capabilities").get("drop") or []):
            no_drop_all.append(name)
        beyond = [cap for cap in _added(context) if cap != "NET_BIND_SERVICE"]
        if beyond:
            adding.append(name)
            extra.update(beyond)
    details = []
    if no_drop_all:
        details.append(f"{_plural('container', 'containers', len(no_drop_all))} {_quote(no_drop_all)} must set "
                       'securityContext.capabilities.drop=["ALL"]')
    if adding:
        details.append(f"{_plural('container', 'containers', len(adding))} {_quote(adding)} must not include "
                       f"{_quote(sorted(extra))} in securityContext.capabilities.add")
    return ("unrestricted capabilities", "; ".join(details)) if details else None


def _host_namespaces(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    shared = sorted(field for field in ("hostNetwork", "hostPID", "hostIPC") if spec.get(field) is True)
    return ("host namespaces", ", ".join(shared)) if shared else None


def _volumes(spec: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for volume in spec.get("volumes") or []:
        if isinstance(volume, dict):
            yield volume


def _host_path_volumes(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    names = [str(v.get("name", "")) for v in _volumes(spec) if v.get("hostPath") is not None]
    if names:
        return ("hostPath volumes", f"{_plural('volume', 'volumes', len(names))} {_quote(names)}")
    return None


def _host_ports(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    containers, ports = [], set()
    for c in _containers(spec):
        used = [p.get("hostPort") for p in c.get("ports") or [] if isinstance(p, dict) and p.get("hostPort")]
        if used:
            containers.append(str(c.get("name", "")))
            ports.update(str(p) for p in used)
    if containers:
        n = len(containers)
        return ("hostPort", f"{_plural('container', 'containers', n)} {_quote(containers)} {_plural('uses', 'use', n)} "
                f"{_plural('hostPort', 'hostPorts', len(ports))} {', '.join(sorted(ports))}")
    return None


def _probe_hosts(container: Mapping[str, Any]) -> list[str]:
    handlers = [_sub(container, probe) for probe in ("livenessProbe", "readinessProbe", "startupProbe")]
    handlers += [_sub(_sub(container, "lifecycle"), hook) for hook in ("postStart", "preStop")]
    return [str(_sub(h, action)["host"]) for h in handlers for action in ("httpGet", "tcpSocket")
            if _sub(h, action).get("host")]


def _host_probes(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    containers, hosts = set(), set()
    for c in _containers(spec):
        found = _probe_hosts(c)
        if found:
            containers.add(str(c.get("name", "")))
            hosts.update(found)
    if containers:
        n = len(containers)
        what = _plural("probe or lifecycle host", "probe or lifecycle hosts", len(hosts))
        return ("probe or lifecycle host", f"{_plural('container', 'containers', n)} {_quote(sorted(containers))} "
                f"{_plural('uses', 'use', n)} {what} {_quote(sorted(hosts))}")
    return None


def _privileged(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    bad = _containers_setting(spec, lambda sc: sc.get("privileged") is True)
    if bad:
        return ("privileged", f"{_plural('container', 'containers', len(bad))} {_quote(bad)} must not set "
                "securityContext.privileged=true")
    return None


def _proc_mount(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    containers, types = [], set()
    for c in _containers(spec):
        mount = _context(c).get("procMount")
        if mount is not None and mount != "Default":
            containers.append(str(c.get("name", "")))
            types.add(str(mount))
    if containers:
        return ("procMount", f"{_plural('container', 'containers', len(containers))} {_quote(containers)} must not set "
                f"securityContext.procMount to {_quote(sorted(types))}")
    return None


_RESTRICTED_VOLUME_TYPES_ALLOWED = frozenset({
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"})


def _restricted_volumes(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    names = sorted({str(v.get("name", "")) for v in _volumes(spec)
                    if not any(v.get(kind) is not None for kind in _RESTRICTED_VOLUME_TYPES_ALLOWED)})
    if names:
        return ("restricted volume types", f'volumes [{" ".join(chr(34) + n + chr(34) for n in names)}] have '
                "restricted types")
    return None


def _run_as_non_root(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    pod_value = _context(spec).get("runAsNonRoot")
    explicit, implicit = [], []
    for c in _containers(spec):
        value = _context(c).get("runAsNonRoot")
        if value is False:
            explicit.append(str(c.get("name", "")))
        elif value is None and pod_value is not True:
            implicit.append(str(c.get("name", "")))
    if pod_value is False or explicit:
        return ("runAsNonRoot != true",
                f"{_setters(pod_value is False, explicit)} must not set securityContext.runAsNonRoot=false")
    if implicit:
        return ("runAsNonRoot != true", f"pod or {_plural('container', 'containers', len(implicit))} "
                f"{_quote(implicit)} must set securityContext.runAsNonRoot=true")
    return None


def _is_zero(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value == 0


def _run_as_user(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    pod_bad = _is_zero(_context(spec).get("runAsUser"))
    bad = _containers_setting(spec, lambda sc: _is_zero(sc.get("runAsUser")))
    if pod_bad or bad:
        return ("runAsUser=0", f"{_setters(pod_bad, bad)} must not set runAsUser=0")
    return None


_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})


def _selinux(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    types: set[str] = set()
    user = role = False

    def bad(context: Mapping[str, Any]) -> bool:
        nonlocal user, role
        options = context.get("seLinuxOptions")
        if not isinstance(options, dict):
            return False
        wrong = False
        if str(options.get("type") or "") not in _SELINUX_TYPES:
            types.add(str(options.get("type")))
            wrong = True
        if options.get("user"):
            user = wrong = True
        if options.get("role"):
            role = wrong = True
        return wrong

    pod_bad = bad(_context(spec))
    containers = _containers_setting(spec, bad)
    if not pod_bad and not containers:
        return None
    data = [f"{_plural('type', 'types', len(types))} {_quote(sorted(types))}"] if types else []
    data += ["user may not be set"] * user + ["role may not be set"] * role
    return ("seLinuxOptions",
            f"{_setters(pod_bad, containers)} set forbidden securityContext.seLinuxOptions: {'; '.join(data)}")


def _seccomp_type(context: Mapping[str, Any]) -> str | None:
    profile = context.get("seccompProfile")
    return str(profile.get("type") or "") if isinstance(profile, dict) else None


def _seccomp(spec: Mapping[str, Any], required: bool) -> Violation | None:
    allowed = ("RuntimeDefault", "Localhost")
    pod_type = _seccomp_type(_context(spec))
    values, explicit, implicit = set(), [], []
    if pod_type is not None and pod_type not in allowed:
        values.add(pod_type)
    for c in _containers(spec):
        own = _seccomp_type(_context(c))
        if own is not None and own not in allowed:
            explicit.append(str(c.get("name", "")))
            values.add(own)
        elif own is None and pod_type not in allowed:
            implicit.append(str(c.get("name", "")))
    pod_bad = pod_type is not None and pod_type not in allowed
    if pod_bad or explicit:
        return ("seccompProfile", f"{_setters(pod_bad, explicit)} must not set securityContext.seccompProfile.type to "
                f"{_quote(sorted(values))}")
    if required and implicit:
        return ("seccompProfile", f"pod or {_plural('container', 'containers', len(implicit))} {_quote(implicit)} "
                'must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"')
    return None


def _seccomp_baseline(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    return _seccomp(spec, required=False)


def _seccomp_restricted(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    return _seccomp(spec, required=True)


_SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"})


def _sysctls(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    names = [str(s.get("name")) for s in _context(spec).get("sysctls") or []
             if isinstance(s, dict) and s.get("name") not in _SAFE_SYSCTLS]
    return ("forbidden sysctls", ", ".join(names)) if names else None


def _host_process(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Violation | None:
    def bad(context: Mapping[str, Any]) -> bool:
        return _sub(context, "windowsOptions").get("hostProcess") is True

    pod_bad = bad(_context(spec))
    containers = _containers_setting(spec, bad)
    if pod_bad or containers:
        return ("hostProcess",
                f"{_setters(pod_bad, containers)} must not set securityContext.windowsOptions.hostProcess=true")
    return None


Check = Callable[[Mapping[str, Any], Mapping[str, Any]], Violation | None]

# Upstream's order (its check files by name), which is the order of a message's reasons. A
# baseline check that a restricted one supersedes runs at baseline only.
_CHECKS: tuple[tuple[str, Check, bool], ...] = (
    (RESTRICTED, _allow_privilege_escalation, False),
    (BASELINE, _apparmor, False),
    (BASELINE, _capabilities_baseline, True),
    (RESTRICTED, _capabilities_restricted, False),
    (BASELINE, _host_namespaces, False),
    (BASELINE, _host_path_volumes, True),
    (BASELINE, _host_ports, False),
    (BASELINE, _host_probes, False),
    (BASELINE, _privileged, False),
    (BASELINE, _proc_mount, False),
    (RESTRICTED, _restricted_volumes, False),
    (RESTRICTED, _run_as_non_root, False),
    (RESTRICTED, _run_as_user, False),
    (BASELINE, _selinux, False),
    (BASELINE, _seccomp_baseline, True),
    (RESTRICTED, _seccomp_restricted, False),
    (BASELINE, _sysctls, False),
    (BASELINE, _host_process, False),
)


def evaluate(level: str, metadata: Mapping[str, Any] | None, spec: Mapping[str, Any] | None) -> list[Violation]:
    """What a pod (its metadata and spec, as in a manifest) violates at ``level``: empty when allowed."""
    if level == PRIVILEGED or not isinstance(spec, Mapping):
        return []
    meta = metadata if isinstance(metadata, Mapping) else {}
    found = []
    for check_level, check, superseded in _CHECKS:
        if check_level == RESTRICTED and level != RESTRICTED or superseded and level == RESTRICTED:
            continue
        violation = check(meta, spec)
        if violation is not None:
            found.append(violation)
    return found


def forbidden_detail(violations: list[Violation]) -> str:
    """``reason (detail), reason (detail)``, as upstream joins them."""
    return ", ".join(f"{reason} ({detail})" if detail else reason for reason, detail in violations)


class Template(Protocol):
    """A pod an object stands for, with its field path in the object (a `kinds.PodTemplate`)."""

    path: str
    metadata: dict[str, Any]
    spec: dict[str, Any]


def judge(level: str, templates: Iterable[Template]) -> str:
    """Every template's violations at ``level``, each behind its field path when it has one
    (``spec.template: hostPath volumes (volume "data")``); "" when all are allowed."""
    found = []
    for template in templates:
        violations = evaluate(level, template.metadata, template.spec)
        if violations:
            found.append((f"{template.path}: " if template.path else "") + forbidden_detail(violations))
    return "; ".join(found)
