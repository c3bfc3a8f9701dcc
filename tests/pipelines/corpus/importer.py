"""dsl.importer: an existing file (artifact_uri, a parameter the test sets to a path under the
pipeline root) imported as a Dataset with metadata made of pipeline values (a placeholder alone keeps
its type, one inside a key becomes text), and read by a step."""
from kfp import dsl
from kfp.dsl import Dataset, Input


@dsl.component
def read(data: Input[Dataset]) -> str:
    metadata = data.metadata
    return f"{open(data.path).read().strip()} {metadata['source']} {metadata['rows'] * 2} {sorted(metadata)}"


@dsl.pipeline(name="importer")
def pipeline(uri: str, source: str = "test", rows: int = 3) -> str:
    imported = dsl.importer(artifact_uri=uri, artifact_class=Dataset, reimport=False,
                            metadata={"source": source, "rows": rows, f"by-{source}": "constant"})
    return read(data=imported.output).output


ARGUMENTS: dict = {}  # uri: set by the test
LOCAL = False  # kfp.local's importer runs, but the uri must be a local path the test makes
