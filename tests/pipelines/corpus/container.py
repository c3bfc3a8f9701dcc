"""Container components: command/args with every placeholder the compiler writes: input values,
output parameter files, artifact paths and URIs, Concat, IfPresent with and without the input,
and the run's context placeholders."""
from typing import Optional

from kfp import dsl
from kfp.dsl import Dataset, Input, Output, OutputPath


@dsl.container_component
def produce(word: str, count: int, data: Output[Dataset], size: OutputPath(int)):
    return dsl.ContainerSpec(
        image="busybox",
        command=["sh", "-c", 'mkdir -p "$(dirname "$2")" "$(dirname "$3")"; '
                 'for i in $(seq "$1"); do echo "$0"; done > "$2"; echo "$1" > "$3"'],
        args=[word, count, data.path, size])


@dsl.container_component
def show(data: Input[Dataset], label: str, suffix: Optional[str] = None):
    return dsl.ContainerSpec(
        image="busybox",
        command=["sh", "-c", 'echo "$@"; cat "$1"', "show"],
        args=[data.path,
              dsl.ConcatPlaceholder(["label=", label, "/", data.uri]),
              dsl.IfPresentPlaceholder(input_name="suffix", then=["--suffix", suffix], else_=["--no-suffix"]),
              dsl.PIPELINE_JOB_NAME_PLACEHOLDER, dsl.PIPELINE_TASK_NAME_PLACEHOLDER,
              dsl.PIPELINE_JOB_ID_PLACEHOLDER, dsl.PIPELINE_TASK_ID_PLACEHOLDER, dsl.PIPELINE_ROOT_PLACEHOLDER])


@dsl.component
def count_lines(data: Input[Dataset], size: int) -> int:
    n = len(open(data.path).read().splitlines())
    assert n == size, (n, size)
    return n


@dsl.pipeline(name="container")
def pipeline(word: str = "hi", count: int = 3) -> int:
    made = produce(word=word, count=count)
    show(data=made.outputs["data"], label="with", suffix="s")
    show(data=made.outputs["data"], label="without")
    return count_lines(data=made.outputs["data"], size=made.outputs["size"]).output


ARGUMENTS = {"word": "yo", "count": 2}
LOCAL = False  # container components: kfp.local's SubprocessRunner refuses them
