"""Caching by fingerprint: a cached step (hit on a second run with the same inputs), one with
caching off (always runs) and one pinned by its own cache key (hit whatever its inputs); each
returns a fresh token so a test sees which ran."""
from kfp import dsl


@dsl.component
def stamp(seed: int) -> str:
    import uuid
    return f"{seed}-{uuid.uuid4().hex}"


@dsl.pipeline(name="caching")
def pipeline(seed: int = 1):
    stamp(seed=seed).set_display_name("cached")
    stamp(seed=seed).set_display_name("uncached").set_caching_options(False)
    stamp(seed=seed).set_display_name("pinned").set_caching_options(True, cache_key="stamp-v1")


ARGUMENTS = {"seed": 1}
LOCAL = True
