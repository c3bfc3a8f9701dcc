"""Resources and environment: set_cpu_request/limit, set_memory_request/limit, an accelerator,
set_env_variable, a display name and a container image override."""
from kfp import dsl


@dsl.component
def env(name: str) -> str:
    import os
    return os.environ.get(name, "<unset>")


@dsl.pipeline(name="resources")
def pipeline() -> str:
    task = env(name="GREETING")
    task.set_cpu_request("100m").set_cpu_limit("1").set_memory_request("64Mi").set_memory_limit("512Mi")
    task.set_env_variable("GREETING", "hello from env").set_display_name("read-env")
    env(name="GREETING").set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)
    return task.output


ARGUMENTS: dict = {}
LOCAL = False  # the accelerator step needs a GPU node
