"""dsl.importer: an existing file (artifact_uri, a parameter the test sets to a path under the
pipeline root) imported as a Dataset with metadata, and read by a step."""
from kfp import dsl
from kfp.dsl import Dataset, Input


@dsl.component
def read(data: Input[Dataset]) -> str:
    return f"{open(data.path).read().strip()} {data.metadata.get('source')}"


@dsl.pipeline(name="importer")
def pipeline(uri: str) -> str:
    imported = dsl.importer(artifact_uri=uri, artifact_class=Dataset, reimport=False,
                            metadata={"source": "test"})
    return read(data=imported.output).output


ARGUMENTS: dict = {}  # uri: set by the test
LOCAL = False  # kfp.local's importer runs, but the uri must be a local path the test makes
