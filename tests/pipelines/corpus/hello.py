"""One lightweight step: the smallest run."""
from kfp import dsl


@dsl.component
def greet(name: str) -> str:
    return f"hello {name}"


@dsl.pipeline(name="hello")
def pipeline(name: str = "world") -> str:
    return greet(name=name).output


ARGUMENTS = {"name": "trimaran"}
LOCAL = True
