"""The bench's pipeline: 20 tasks of trivial lightweight components (a source, a fan-out of 16 and a
fan-in)."""
from typing import List

from kfp import dsl


@dsl.component
def source(n: int) -> list:
    return list(range(n))


@dsl.component
def work(x: int) -> int:
    return x + 1


@dsl.component
def gather(values: List[int]) -> int:
    return int(sum(values))  # kfp.local collects ints as doubles


@dsl.pipeline(name="fanout")
def pipeline(n: int = 16) -> int:
    items = source(n=n)
    with dsl.ParallelFor(items.output, parallelism=16) as x:
        done = work(x=x)
    return gather(values=dsl.Collected(done.output)).output


ARGUMENTS = {"n": 16}
LOCAL = True
