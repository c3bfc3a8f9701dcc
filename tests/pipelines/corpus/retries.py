"""set_retry with back-off: the step fails on its first two attempts (counted in marker_dir) and
succeeds on the third; a step with no retries left fails the run."""
from kfp import dsl


@dsl.component
def flaky(marker_dir: str, fail_times: int) -> int:
    import os
    path = os.path.join(marker_dir, "attempts")
    attempts = int(open(path).read()) + 1 if os.path.exists(path) else 1
    with open(path, "w") as f:
        f.write(str(attempts))
    if attempts <= fail_times:
        raise RuntimeError(f"attempt {attempts} fails")
    return attempts


@dsl.pipeline(name="retries")
def pipeline(marker_dir: str, fail_times: int = 2) -> int:
    task = flaky(marker_dir=marker_dir, fail_times=fail_times)
    task.set_retry(num_retries=3, backoff_duration="0s", backoff_factor=2.0, backoff_max_duration="1s")
    task.set_caching_options(False)
    return task.output


ARGUMENTS: dict = {}  # marker_dir: set by the test
LOCAL = True
