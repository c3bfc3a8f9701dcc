"""Caching by fingerprint: a cached step (hit on a second run with the same inputs) and one with
caching off (always runs); both return a fresh token so a test sees which ran."""
from kfp import dsl


@dsl.component
def stamp(seed: int) -> str:
    import uuid
    return f"{seed}-{uuid.uuid4().hex}"


@dsl.pipeline(name="caching")
def pipeline(seed: int = 1):
    stamp(seed=seed).set_display_name("cached")
    stamp(seed=seed).set_display_name("uncached").set_caching_options(False)


ARGUMENTS = {"seed": 1}
LOCAL = True
