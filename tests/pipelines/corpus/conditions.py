"""dsl.If/Elif/Else on a string, an int and a float (the compiler casts with int()/double()), nested
conditions, and a condition on a task's output."""
from kfp import dsl


@dsl.component
def echo(msg: str) -> str:
    return msg


@dsl.component
def number(n: int) -> int:
    return n


@dsl.pipeline(name="conditions")
def pipeline(flip: str = "heads", n: int = 5, x: float = 0.5):
    with dsl.If(flip == "heads", name="is-heads"):
        echo(msg="heads")
    with dsl.Elif(flip == "tails"):
        echo(msg="tails")
    with dsl.Else():
        echo(msg="edge")
    num = number(n=n)
    with dsl.If(num.output > 3):
        with dsl.If(x < 1.0):
            echo(msg="big n, small x")
    with dsl.If(num.output <= 3):
        echo(msg="small n")


ARGUMENTS = {"flip": "tails", "n": 7, "x": 0.25}
LOCAL = True
