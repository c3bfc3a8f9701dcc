"""dsl.OneOf: the output of whichever branch of an If/Else ran, a parameter and an artifact."""
from kfp import dsl
from kfp.dsl import Artifact, Input, Output


@dsl.component
def say(msg: str) -> str:
    return msg


@dsl.component
def mark(msg: str, out: Output[Artifact]):
    with open(out.path, "w") as f:
        f.write(msg)


@dsl.component
def read(a: Input[Artifact]) -> str:
    return open(a.path).read()


@dsl.pipeline(name="oneof")
def pipeline(flip: str = "heads") -> str:
    with dsl.If(flip == "heads"):
        heads = say(msg="heads won")
        heads_art = mark(msg="H")
    with dsl.Else():
        tails = say(msg="tails won")
        tails_art = mark(msg="T")
    read(a=dsl.OneOf(heads_art.outputs["out"], tails_art.outputs["out"]))
    return dsl.OneOf(heads.output, tails.output)


ARGUMENTS = {"flip": "tails"}
LOCAL = False  # kfp.local 2.17.3 fails on an artifact OneOf ("Expected 1 artifact in ArtifactSelectorSpec")
