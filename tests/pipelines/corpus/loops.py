"""dsl.ParallelFor over a constant list (parallelism 2), over a pipeline input, over a task's output
list and over dicts, with dsl.Collected fan-ins of parameters and artifacts."""
from typing import List

from kfp import dsl
from kfp.dsl import Dataset, Input, Output


@dsl.component
def square(x: int) -> int:
    return x * x


@dsl.component
def total(values: List[int]) -> int:
    return int(sum(values))  # kfp.local collects ints as doubles


@dsl.component
def make_list(n: int) -> list:
    return list(range(n))


@dsl.component
def pair(a: int, b: int) -> int:
    return a * b


@dsl.component
def write(x: int, out: Output[Dataset]):
    with open(out.path, "w") as f:
        f.write(str(x))


@dsl.component
def concat(parts: Input[List[Dataset]]) -> str:
    return ",".join(sorted(open(p.path).read() for p in parts))


@dsl.pipeline(name="loops")
def pipeline(numbers: List[int] = [1, 2, 3]) -> int:  # noqa: B006 -- KFP's defaults
    with dsl.ParallelFor([1, 2, 3, 4], parallelism=2) as item:
        sq = square(x=item)
    sum_const = total(values=dsl.Collected(sq.output))
    with dsl.ParallelFor(numbers) as n:
        written = write(x=n)
    concat(parts=dsl.Collected(written.outputs["out"]))
    listed = make_list(n=3)
    with dsl.ParallelFor(listed.output) as i:
        square(x=i)
    with dsl.ParallelFor([{"a": 1, "b": 10}, {"a": 2, "b": 20}]) as d:
        pair(a=d.a, b=d.b)
    return sum_const.output


ARGUMENTS = {"numbers": [5, 6]}
LOCAL = True
