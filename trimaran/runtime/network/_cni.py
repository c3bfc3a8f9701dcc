"""Running CNI plugins as libcni does: one process per plugin of the conflist, the command in
``CNI_COMMAND``, the plugin's configuration (with ``prevResult``) on stdin, the result on stdout."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence

__all__ = ["CNI_VERSION", "CniError", "find_plugin", "run_list", "run_plugin"]

CNI_VERSION = "1.0.0"


class CniError(RuntimeError):
    """A plugin failed; the message is libcni's (``plugin type="bridge" failed (add): ...``)."""


def find_plugin(name: str, cni_path: Sequence[str]) -> str | None:
    for directory in cni_path:
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def run_plugin(conf: Mapping, command: str, container_id: str, netns: str | None, cni_path: Sequence[str],
               args: Mapping[str, str] | None = None, ifname: str = "eth0") -> dict:
    """Run the plugin ``conf["type"]`` once; its result (``{}`` for DEL and CHECK)."""
    plugin_type = str(conf["type"])
    binary = find_plugin(plugin_type, cni_path)
    if binary is None:
        raise CniError(f'failed to find plugin "{plugin_type}" in path [{" ".join(cni_path)}]')
    env = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": container_id,
        "CNI_NETNS": netns or "",
        "CNI_IFNAME": ifname,
        "CNI_PATH": ":".join(cni_path),
        "CNI_ARGS": ";".join(f"{k}={v}" for k, v in {"IgnoreUnknown": "1", **(args or {})}.items()),
        "PATH": os.environ.get("PATH") or "/usr/sbin:/usr/bin:/sbin:/bin",
    }
    proc = subprocess.run([binary], input=json.dumps(conf).encode(), env=env, capture_output=True)
    out = proc.stdout.decode(errors="replace").strip()
    if proc.returncode != 0:
        try:
            error = json.loads(out)
            msg = str(error.get("msg") or "")
            if error.get("details"):
                msg += f": {error['details']}"
        except ValueError:
            msg = (out or proc.stderr.decode(errors="replace")).strip() or f"exit status {proc.returncode}"
        raise CniError(f'plugin type="{plugin_type}" failed ({command.lower()}): {msg}')
    if command != "ADD":
        return {}
    try:
        return json.loads(out)
    except ValueError:
        raise CniError(f'plugin type="{plugin_type}" failed (add): not a result: {out[:200]!r}') from None


def run_list(conflist: Mapping, command: str, container_id: str, netns: str | None, cni_path: Sequence[str],
             args: Mapping[str, str] | None = None, runtime_config: Mapping | None = None,
             prev_result: Mapping | None = None) -> dict:
    """Run every plugin of ``conflist``: ADD in order, each given the previous result; DEL in
    reverse, each given ``prev_result`` (the cached ADD result), and going on past failures (DEL must
    finish: the first error is raised at the end); CHECK in order with ``prev_result``."""
    plugins = list(conflist["plugins"])
    result: dict = dict(prev_result or {})
    first_error: CniError | None = None
    for plugin in (reversed(plugins) if command == "DEL" else plugins):
        conf = {"cniVersion": conflist["cniVersion"], "name": conflist["name"], **plugin}
        wanted = {k for k, v in (plugin.get("capabilities") or {}).items() if v}
        rc = {k: v for k, v in (runtime_config or {}).items() if k in wanted}
        if rc:
            conf["runtimeConfig"] = rc
        if result:
            conf["prevResult"] = result
        try:
            out = run_plugin(conf, command, container_id, netns, cni_path, args)
        except CniError as exc:
            if command != "DEL":
                raise
            first_error = first_error or exc
            continue
        if command == "ADD":
            result = out
    if first_error is not None:
        raise first_error
    return result
