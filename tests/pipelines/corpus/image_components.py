"""Lightweight components run in their images (--image-policy image): one with kfp alone, one with
packages_to_install (a wheel the test puts in the home's local wheels), an artifact between them.
`python-image` is a stand-in: the test sets each executor's image to its registry's."""
from kfp import dsl
from kfp.dsl import Dataset, Input, Output


@dsl.component(base_image="python-image")
def write(name: str, data: Output[Dataset]) -> str:
    import sys

    with open(data.path, "w") as f:
        f.write(name)
    return ".".join(map(str, sys.version_info[:2]))


@dsl.component(base_image="python-image", packages_to_install=["trimaran-greeting==1.0"])
def greet(data: Input[Dataset]) -> str:
    import trimaran_greeting

    with open(data.path) as f:
        return trimaran_greeting.greet(f.read())


@dsl.pipeline(name="image-components")
def pipeline(name: str = "world") -> str:
    return greet(data=write(name=name).outputs["data"]).output


ARGUMENTS = {"name": "trimaran"}
LOCAL = False  # its package comes from a wheel only the test's control plane has
