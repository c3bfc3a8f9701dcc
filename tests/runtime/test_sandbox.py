"""The bubblewrap command line: host view, mount points, hosts file; and the shim's entry."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trimaran.runtime.sandbox import (
    SandboxUnavailable,
    build_argv,
    hosts_file,
    interpreter_paths,
    private_etc_entries,
    sandbox_available,
)
from trimaran.runtime.volumes import Mount

REPO = Path(__file__).resolve().parents[2]


def test_hosts_file_groups_names_by_address() -> None:
    text = hosts_file("w-0", {"w-0": "127.0.0.1", "w-0.default.svc": "127.0.0.1", "w-1": "127.0.0.2"})
    lines = text.splitlines()
    assert "127.0.0.1\tlocalhost" in lines
    assert lines[-2:] == ["127.0.0.1\tw-0 w-0.default.svc", "127.0.0.2\tw-1"]
    # The pod's own hostname is always resolvable.
    assert hosts_file("solo", {}).splitlines()[-1] == "127.0.0.1\tsolo"
    # A pod naming a subdomain finds its fully qualified name first, as the kubelet writes it.
    assert hosts_file("w-0", {}, "10.1.0.5", "w-0.mesh.team.svc.cluster.local").splitlines()[-1] == \
        "10.1.0.5\tw-0.mesh.team.svc.cluster.local w-0"
    # Also where the peers' names, its own among them, are given.
    peers = {"w-1": "10.1.0.6", "w-0": "10.1.0.5"}
    assert hosts_file("w-0", peers, "10.1.0.5", "w-0.mesh.team.svc.cluster.local").splitlines()[-1] == \
        "10.1.0.5\tw-0.mesh.team.svc.cluster.local w-0"


def test_unavailable_message_says_what_to_install() -> None:
    message = str(SandboxUnavailable())
    assert "apt-get install bubblewrap" in message and "dnf install bubblewrap" in message


@pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")
def test_mount_points_under_read_only_host_directories(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "app.yaml").write_text("lr: 0.1\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "hosts").write_text(hosts_file("box", {}))
    (tmp_path / "hostname").write_text("box\n")
    assert not Path("/etc/trimaran-test-config").exists() and not Path("/workspace").exists()
    argv = build_argv(
        ["sh", "-c", "pwd; cat /etc/trimaran-test-config/app.yaml; test -r /etc/passwd && echo passwd; "
                     "touch /data/out /data/nested/ok && echo wrote; touch /usr/nope 2>/dev/null || echo ro"],
        mounts=[Mount("/etc/trimaran-test-config", tmp_path / "config", read_only=True),
                Mount("/data", tmp_path / "data"),
                Mount("/data/nested", None, size=1024 * 1024)],
        hostname="box",
        hosts_path=tmp_path / "hosts",
        hostname_path=tmp_path / "hostname",
        working_dir="/workspace/job",
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["/workspace/job", "lr:", "0.1", "passwd", "wrote", "ro"]
    assert (tmp_path / "data" / "out").exists()
    assert not Path("/etc/trimaran-test-config").exists() and not Path("/workspace").exists()


def test_interpreter_paths_are_those_a_fresh_tmp_would_hide(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    venv.mkdir()
    assert interpreter_paths([str(venv), "/usr", str(venv), str(tmp_path / "missing")]) == [str(venv)]


@pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")
def test_an_environment_under_tmp_stays_visible(tmp_path: Path) -> None:
    env_dir = tmp_path / "checkout" / ".venv"
    env_dir.mkdir(parents=True)
    (env_dir / "marker").write_text("here\n")
    (tmp_path / "hosts").write_text(hosts_file("box", {}))
    (tmp_path / "hostname").write_text("box\n")

    def run(keep: list[str]) -> subprocess.CompletedProcess:
        argv = build_argv(["cat", str(env_dir / "marker")], mounts=[], hostname="box",
                          hosts_path=tmp_path / "hosts", hostname_path=tmp_path / "hostname", keep_visible=keep)
        return subprocess.run(argv, capture_output=True, text=True, timeout=30)

    assert run([str(env_dir)]).stdout == "here\n"
    assert run([]).returncode != 0, "without it, /tmp inside the sandbox is empty"


def test_shim_runs_as_a_module_without_site_packages() -> None:
    done = subprocess.run([sys.executable, "-S", "-m", "trimaran.runtime.shim"], capture_output=True,
                          text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=30)
    assert done.returncode == 2 and "usage" in done.stderr


def test_private_etc_entries_are_those_others_cannot_read(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    (etc / "ssl" / "private").mkdir(parents=True)
    (etc / "ssl" / "private" / "key.pem").write_text("secret")
    (etc / "ssl" / "certs.pem").write_text("public")
    (etc / "shadow").write_text("root:x")
    (etc / "passwd").write_text("root:x:0:0")
    os.chmod(etc / "shadow", 0o640)
    os.chmod(etc / "ssl" / "private", 0o700)
    assert private_etc_entries(str(etc)) == ((str(etc / "shadow"), False), (str(etc / "ssl" / "private"), True))


@pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")
def test_the_home_and_a_checkouts_git_are_hidden_where_they_lie_in_a_visible_directory(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / ".trimaran" / "pods").mkdir(parents=True)
    (checkout / ".trimaran" / "tokens.json").write_text("{}")
    (checkout / ".git").mkdir()
    (checkout / ".git" / "config").write_text("url = https://user:secret@example.com/repo\n")
    (checkout / "train.py").write_text("print('ok')\n")
    (tmp_path / "hosts").write_text(hosts_file("box", {}))
    (tmp_path / "hostname").write_text("box\n")
    script = (f"test -r {checkout}/train.py && echo checkout; ls -A {checkout}/.trimaran | wc -l; "
              f"ls -A {checkout}/.git | wc -l; "
              "test -s /etc/shadow && echo shadow; ls -A /run | wc -l; ls -A /root /home 2>/dev/null; true")
    argv = build_argv(["sh", "-c", script], mounts=[], hostname="box", hosts_path=tmp_path / "hosts",
                      hostname_path=tmp_path / "hostname", keep_visible=[str(checkout)],
                      hidden=[str(checkout / ".trimaran")])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.stdout.split() == ["checkout", "0", "0", "0"], done.stdout + done.stderr
