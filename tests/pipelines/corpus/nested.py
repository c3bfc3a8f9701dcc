"""A pipeline used as a component inside another, its output consumed by the outer pipeline, and a
nested pipeline inside a loop."""
from kfp import dsl
from kfp.dsl import Dataset, Input, Output


@dsl.component
def add(a: int, b: int) -> int:
    return a + b


@dsl.component
def save(x: int, out: Output[Dataset]):
    with open(out.path, "w") as f:
        f.write(str(x))


@dsl.component
def load(data: Input[Dataset]) -> int:
    return int(open(data.path).read())


@dsl.pipeline(name="inner")
def inner(a: int, b: int) -> Dataset:
    s = add(a=a, b=b)
    return save(x=s.output).outputs["out"]


@dsl.pipeline(name="nested")
def pipeline(a: int = 1, b: int = 2) -> int:
    data = inner(a=a, b=b)
    loaded = load(data=data.output)
    with dsl.ParallelFor([10, 20]) as item:
        inner(a=loaded.output, b=item)
    return loaded.output


ARGUMENTS = {"a": 3, "b": 4}
LOCAL = True
