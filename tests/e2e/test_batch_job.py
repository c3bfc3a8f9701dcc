"""batch/v1 Jobs: Indexed completion, parallelism, backoffLimit, kubectl's conditions."""

from __future__ import annotations

import textwrap


def _indexed(tmp_path, name: str, completions: int, parallelism: int, script: str, backoff: int = 6) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(textwrap.dedent(f"""
        apiVersion: batch/v1
        kind: Job
        metadata:
          name: {name}
        spec:
          completions: {completions}
          parallelism: {parallelism}
          completionMode: Indexed
          backoffLimit: {backoff}
          template:
            spec:
              restartPolicy: Never
              containers:
                - name: main
                  image: python:3.11
                  command: ["python", "-c", {script!r}]
                  volumeMounts: [{{name: results, mountPath: /results}}]
              volumes:
                - name: results
                  persistentVolumeClaim: {{claimName: {name}-results}}
    """))
    return str(path)


def test_indexed_job_runs_every_index_once(plane, tmp_path):
    script = ("import os, socket; i = os.environ['JOB_COMPLETION_INDEX']; "
              "open(f'/results/{i}.txt', 'w').write(socket.gethostname())")
    plane.cli("apply", "-f", _indexed(tmp_path, "sweep", 5, 2, script))
    plane.cli("wait", "job/sweep", "--for=condition=Complete", "--timeout=120s")
    out = plane.home / "volumes/default/sweep-results"
    assert sorted(p.name for p in out.iterdir()) == [f"{i}.txt" for i in range(5)]
    assert (out / "3.txt").read_text() == "sweep-3"
    job = plane.get("job", "sweep")
    assert job["status"]["completedIndexes"] == "0-4"
    assert job["status"]["succeeded"] == 5
    table = plane.cli("get", "jobs").stdout
    assert "sweep" in table and "Complete" in table and "5/5" in table


def test_job_fails_after_backoff_limit(plane, tmp_path):
    plane.cli("apply", "-f", _indexed(tmp_path, "broken", 1, 1, "raise SystemExit(2)", backoff=1))
    plane.cli("wait", "job/broken", "--for=condition=Failed", "--timeout=60s")
    job = plane.get("job", "broken")
    failed = [c for c in job["status"]["conditions"] if c["type"] == "Failed"][0]
    assert failed["reason"] == "BackoffLimitExceeded"
    assert job["status"]["failed"] == 2
