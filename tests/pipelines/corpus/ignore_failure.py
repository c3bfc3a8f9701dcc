"""ignore_upstream_failure: a clean-up step runs after its upstream failed; a step that depends on
the failed one without it does not run."""
from kfp import dsl


@dsl.component
def fail():
    raise RuntimeError("planned failure")


@dsl.component
def cleanup(msg: str) -> str:
    return msg


@dsl.pipeline(name="ignore-failure")
def pipeline():
    failed = fail()
    cleanup(msg="cleaned").after(failed).ignore_upstream_failure()
    cleanup(msg="never").after(failed)


ARGUMENTS: dict = {}
LOCAL = True
