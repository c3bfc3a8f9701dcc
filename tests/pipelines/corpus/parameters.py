"""Every parameter type in and out (str, int, float, bool, list, dict), a NamedTuple output, optional
inputs with and without a value, and the pipeline's own outputs."""
from typing import NamedTuple, Optional

from kfp import dsl


@dsl.component
def produce(text: str, count: int, ratio: float, flag: bool, items: list, config: dict) -> NamedTuple(
        "Outputs", text=str, count=int, ratio=float, flag=bool, items=list, config=dict):
    outputs = NamedTuple("Outputs", text=str, count=int, ratio=float, flag=bool, items=list, config=dict)
    return outputs(text.upper(), count * 2, ratio / 2, not flag, items + [len(items)], {**config, "seen": True})


@dsl.component
def describe(text: str, count: int, ratio: float, flag: bool, items: list, config: dict,
             note: Optional[str] = None, scale: int = 10) -> str:
    assert isinstance(count, int) and isinstance(ratio, float) and isinstance(flag, bool)
    return f"{text}|{count * scale}|{ratio}|{flag}|{items}|{sorted(config.items())}|{note}"


@dsl.pipeline(name="parameters")
def pipeline(text: str = "abc", count: int = 3, ratio: float = 0.5, flag: bool = True,
             items: list = [1, 2], config: dict = {"k": "v"}) -> str:  # noqa: B006 -- KFP's defaults
    out = produce(text=text, count=count, ratio=ratio, flag=flag, items=items, config=config)
    return describe(text=out.outputs["text"], count=out.outputs["count"], ratio=out.outputs["ratio"],
                    flag=out.outputs["flag"], items=out.outputs["items"], config=out.outputs["config"],
                    note="n").output


ARGUMENTS = {"text": "xyz", "count": 4, "ratio": 1.5, "flag": False, "items": ["a"], "config": {"a": 1}}
LOCAL = True
