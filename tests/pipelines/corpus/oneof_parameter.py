"""dsl.OneOf of parameters across If/Elif/Else branches (kfp.local runs this one)."""
from kfp import dsl


@dsl.component
def say(msg: str) -> str:
    return msg


@dsl.pipeline(name="oneof-parameter")
def pipeline(n: int = 1) -> str:
    with dsl.If(n == 1):
        one = say(msg="one")
    with dsl.Elif(n == 2):
        two = say(msg="two")
    with dsl.Else():
        many = say(msg="many")
    return dsl.OneOf(one.output, two.output, many.output)


ARGUMENTS = {"n": 2}
LOCAL = True
