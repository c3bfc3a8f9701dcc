"""Artifacts of each type (Artifact, Dataset, Model, Metrics, ClassificationMetrics, HTML, Markdown)
written by one step with metadata and read by the next; an OutputPath parameter read as a value."""
from kfp import dsl
from kfp.dsl import HTML, Artifact, ClassificationMetrics, Dataset, Input, Markdown, Metrics, Model, Output, OutputPath


@dsl.component
def train(rows: int, dataset: Output[Dataset], model: Output[Model], metrics: Output[Metrics],
          confusion: Output[ClassificationMetrics], report: Output[HTML], notes: Output[Markdown],
          extra: Output[Artifact], raw: OutputPath(str)):
    with open(dataset.path, "w") as f:
        f.write("\n".join(str(i) for i in range(rows)))
    dataset.metadata["rows"] = rows
    with open(model.path, "w") as f:
        f.write("weights")
    model.metadata["framework"] = "none"
    metrics.log_metric("accuracy", 0.75)
    metrics.log_metric("rows", rows)
    confusion.log_confusion_matrix(["a", "b"], [[3, 1], [0, 4]])
    confusion.log_roc_curve([0.0, 0.5, 1.0], [0.0, 0.8, 1.0], [1.0, 0.5, 0.0])
    with open(report.path, "w") as f:
        f.write("<h1>report</h1><script>alert(1)</script>")
    with open(notes.path, "w") as f:
        f.write("# notes\n*bold*")
    with open(extra.path, "w") as f:
        f.write("extra")
    with open(raw, "w") as f:
        f.write("raw text")


@dsl.component
def evaluate(dataset: Input[Dataset], model: Input[Model], metrics: Input[Metrics], extra: Input[Artifact],
             raw: str) -> str:
    lines = open(dataset.path).read().splitlines()
    return (f"{len(lines)} rows={dataset.metadata['rows']} {open(model.path).read()} "
            f"{model.metadata['framework']} acc={metrics.metadata['accuracy']} "
            f"{open(extra.path).read()} {raw}")


@dsl.pipeline(name="artifacts")
def pipeline(rows: int = 4) -> str:
    t = train(rows=rows)
    return evaluate(dataset=t.outputs["dataset"], model=t.outputs["model"], metrics=t.outputs["metrics"],
                    extra=t.outputs["extra"], raw=t.outputs["raw"]).output


ARGUMENTS = {"rows": 5}
LOCAL = True
