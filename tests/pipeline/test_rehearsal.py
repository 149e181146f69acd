"""Tests of the Vertex dress rehearsal (``make pipeline-rehearse``): the parts that stand in for
Vertex (resolver queries, the cache key, the DAG order, the image copy, a failing task) on small
specs, and the whole rehearsal end to end as a user runs it."""

import json
import os
import re
import subprocess

import pytest

from pipeline import rehearsal
from tests.paths import REPO_ROOT

MODEL = "title: tfx.Model\ntype: object\n"
BLESSING = "title: tfx.ModelBlessing\ntype: object\n"


def _artifact(name, schema, created, **metadata):
    return rehearsal.Artifact(name, rehearsal.title_of(schema), schema, f"gs://b/{name}", metadata,
                              created=created)


def test_resolver_filters_select_the_newest_blessed_blessing_and_its_model_by_name(tmp_path):
    store = rehearsal.ArtifactStore(str(tmp_path / "metadata.json"))
    for artifact in (_artifact("model-1", MODEL, 1), _artifact("model-2", MODEL, 2),
                     _artifact("blessing-1", BLESSING, 3, blessed=1.0, current_model_id="model-1"),
                     _artifact("blessing-2", BLESSING, 4, blessed=0.0, current_model_id="model-2")):
        store.add(artifact)
    blessing_filter = ('schema_title="tfx.ModelBlessing" AND state=LIVE AND '
                       'metadata.blessed.number_value=1')
    (blessing,) = store.query(blessing_filter)[:1]
    assert blessing.name == "blessing-1"  # the newer blessing is not blessed
    model_filter = ('schema_title="tfx.Model" AND state=LIVE AND '
                    'name="{{$.inputs.artifacts[\'input\'].metadata[\'current_model_id\']}}"')
    resolved = rehearsal.resolve_filter(model_filter, {"input": [blessing]})
    assert [artifact.name for artifact in store.query(resolved)] == ["model-1"]
    # A numeric model id (what TFX's entrypoint leaves for non-Evaluator executors) finds nothing.
    numeric = _artifact("blessing-3", BLESSING, 5, blessed=1.0, current_model_id=3.5e18)
    assert store.query(rehearsal.resolve_filter(model_filter, {"input": [numeric]})) == []
    # No blessing: the model query matches nothing instead of failing.
    assert rehearsal.resolve_filter(model_filter, {"input": []}) is None
    # The store is what a later run's resolver reads.
    assert [a.name for a in rehearsal.ArtifactStore(str(tmp_path / "metadata.json")).query(
        blessing_filter)] == ["blessing-1"]


def test_filter_clauses_that_cannot_be_evaluated_are_errors_not_matches():
    with pytest.raises(rehearsal.RehearsalError, match="filter clause"):
        rehearsal.parse_clause("create_time > 3")
    with pytest.raises(rehearsal.RehearsalError, match="filter field"):
        rehearsal.clause_matches(_artifact("a", MODEL, 1), "uri_prefix", "gs://")


def _spec(tasks):
    return {"root": {"dag": {"tasks": tasks}}}


def test_task_order_follows_dependencies_and_artifact_producers():
    spec = _spec({
        "evaluator": {"dependentTasks": ["trainer"], "inputs": {"artifacts": {"baseline": {
            "taskOutputArtifact": {"producerTask": "model-resolver", "outputArtifactKey": "m"}}}}},
        "trainer": {"dependentTasks": ["ingest"]},
        "ingest": {},
        # No dependentTasks: the only edge is the artifact it takes, as in the compiled resolver.
        "model-resolver": {"inputs": {"artifacts": {"input": {"taskOutputArtifact": {
            "producerTask": "blessing-resolver", "outputArtifactKey": "b"}}}}},
        "blessing-resolver": {},
    })
    order = rehearsal.task_order(spec)
    for before, after in (("ingest", "trainer"), ("trainer", "evaluator"),
                          ("blessing-resolver", "model-resolver"), ("model-resolver", "evaluator")):
        assert order.index(before) < order.index(after)
    with pytest.raises(rehearsal.RehearsalError, match="cycle"):
        rehearsal.task_order(_spec({"a": {"dependentTasks": ["b"]}, "b": {"dependentTasks": ["a"]}}))


def test_cache_key_changes_with_input_artifacts_parameters_and_command():
    task = {"inputs": {"parameters": {"config": {"runtimeValue": {"constant": "{}"}}}}}
    component = {"outputDefinitions": {"artifacts": {"model": {"artifactType": {"instanceSchema": MODEL}}}}}
    container = {"image": "image", "command": ["python"], "args": ["--x", "{{$}}"]}
    inputs = {"examples": [_artifact("examples-1", MODEL, 1)]}
    key = rehearsal.cache_key(task, component, container, inputs)
    assert key == rehearsal.cache_key(task, component, container, dict(inputs))
    other_task = {"inputs": {"parameters": {"config": {"runtimeValue": {"constant": "{\"a\": 1}"}}}}}
    assert len({key,
                rehearsal.cache_key(other_task, component, container, inputs),
                rehearsal.cache_key(task, component, dict(container, args=["--y"]), inputs),
                rehearsal.cache_key(task, component, container,
                                    {"examples": [_artifact("examples-2", MODEL, 1)]})}) == 4


def test_the_image_copy_holds_what_the_dockerfile_copies_and_nothing_else(tmp_path):
    image = rehearsal.copy_image_tree(os.path.join(REPO_ROOT, "Dockerfile"), str(tmp_path / "image"))
    assert sorted(os.listdir(image)) == ["README.md", "components", "constraints.txt", "pipeline",
                                         "schemas", "setup.py"]
    assert os.path.exists(os.path.join(image, "schemas", "schema.pbtxt"))
    assert not any("__pycache__" in directory for directory, _, _ in os.walk(image))


def test_a_failing_task_stops_the_run_names_its_log_and_runs_nothing_after_it(tmp_path):
    image = tmp_path / "image"
    image.mkdir()
    for package in ("components", "pipeline"):
        (image / package).mkdir()
        (image / package / "__init__.py").write_text("")
    fail = {"container": {"image": "i", "command": ["python", "-c"],
                          "args": ["import sys; print('executor input', sys.argv[1][:20]); sys.exit(3)",
                                   "{{$}}"]}}
    succeed = {"container": {"image": "i", "command": ["python", "-c"], "args": ["pass", "{{$}}"]}}
    job = {"runtimeConfig": {"gcsOutputDirectory": "gs://bucket/root"}, "pipelineSpec": {
        "root": {"dag": {"tasks": {"first": {"componentRef": {"name": "first"}},
                                   "second": {"componentRef": {"name": "second"},
                                              "dependentTasks": ["first"]}}}},
        "components": {"first": {"executorLabel": "first_executor"},
                       "second": {"executorLabel": "second_executor"}},
        "deploymentSpec": {"executors": {"first_executor": fail, "second_executor": succeed}}}}
    lines = []
    runner = rehearsal.Rehearsal(job, str(tmp_path / "rehearsal"), str(image), log=lines.append)
    runner.check_image_copy_is_imported()
    with pytest.raises(rehearsal.RehearsalError, match="first exited with 3; its log: (.*first.log)"):
        runner.run("job-1")
    assert len(lines) == 1 and "first" in lines[0] and "FAILED" in lines[0]
    log = (tmp_path / "rehearsal" / "logs" / "job-1" / "first.log").read_text()
    assert "executor input {\"inputs\"" in log


@pytest.mark.e2e
def test_make_pipeline_rehearse_runs_the_compiled_pipeline_twice_and_the_second_evaluator_gets_a_baseline(
        tmp_path):
    completed = subprocess.run(["make", "--no-print-directory", "pipeline-rehearse",
                                f"OUTPUT_DIR={tmp_path}"], cwd=REPO_ROOT, capture_output=True,
                               text=True, timeout=1200, check=False)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    output = completed.stdout
    runs = re.split(r"^Run \d of 2 ", output, flags=re.MULTILINE)[1:]
    assert len(runs) == 2, output
    container_tasks = ("Flickr8kExampleGen", "ImportSchemaGen", "StatisticsGen", "ExampleValidator",
                       "ExampleValidationGate", "Transform", "Trainer", "CaptionEvaluator", "Pusher")
    for task in container_tasks:
        assert re.search(rf"^  {task} +ran in +\d+ s$", runs[0], re.MULTILINE), (task, runs[0])
    # The second run retrains with the next seed: Vertex's cache serves what comes before.
    for task in container_tasks[:6]:
        assert re.search(rf"^  {task} +cached", runs[1], re.MULTILINE), (task, runs[1])
    for task in container_tasks[6:]:
        assert re.search(rf"^  {task} +ran in", runs[1], re.MULTILINE), (task, runs[1])
    assert re.search(r"model-resolver +ran in +\d+ s  \(0 artifacts found\)", runs[0])
    assert re.search(r"model-resolver +ran in +\d+ s  \(1 artifact found\)", runs[1])
    assert "evaluation: BLESSED" in runs[0] and "baseline model: none" in runs[0]

    root = tmp_path / "rehearsal"
    store = json.loads((root / "metadata.json").read_text())["artifacts"]
    models = [a for a in store if a["schema_title"] == "tfx.Model"]
    evaluations = [a for a in store if a["schema_title"] == "tfx.ModelEvaluation"]
    assert len(models) == len(evaluations) == 2
    first_model, second_evaluation = models[0], evaluations[1]
    local = str(root / "gcs") + "/"
    metrics = json.loads(open(second_evaluation["uri"].replace("gs://", local) + "/metrics.json").read())
    assert metrics["baseline_model"].replace(local, "gs://") == first_model["uri"] + "/Format-Serving"
    assert "latest blessed model" in metrics["splits"][metrics["bless_split"]]["metrics"]
    # The blessing names its model by resource name, which the resolver's query looks up.
    blessings = [a for a in store if a["schema_title"] == "tfx.ModelBlessing"]
    assert blessings[0]["metadata"]["current_model_id"] == first_model["name"]
    # Every artifact is under the mapped bucket, written by the tasks through gs:// URIs.
    assert all(a["uri"].startswith("gs://rehearsal-bucket/pipeline_root/") for a in store)
    pushed = sorted(name for name in os.listdir(root / "gcs" / "rehearsal-bucket" / "serving_model")
                    if name.isdigit())
    assert pushed, "the blessed model of the first run was not pushed"
    assert "Rehearsal passed: 2 runs" in output
    # As quiet as make pipeline-local (each task's own output goes to its log file): only the
    # compile's warning about the data, once per run, as make pipeline-compile prints it.
    warnings = completed.stderr.strip().splitlines()
    assert len(warnings) == 2 and all("Data fingerprint not computed" in line for line in warnings), (
        completed.stderr[-3000:])


def test_an_importer_registers_its_constant_uri_as_a_new_artifact(tmp_path):
    job = {"runtimeConfig": {"gcsOutputDirectory": "gs://bucket/root"}, "pipelineSpec": {
        "root": {"dag": {"tasks": {"schema-importer": {"componentRef": {"name": "importer"}}}}},
        "components": {"importer": {"executorLabel": "importer_executor", "outputDefinitions": {
            "artifacts": {"result": {"artifactType": {"instanceSchema": "title: tfx.Schema\n"}}}}}},
        "deploymentSpec": {"executors": {"importer_executor": {"importer": {
            "artifactUri": {"constant": "gs://bucket/schema"},
            "typeSchema": {"instanceSchema": "title: tfx.Schema\n"}}}}}}}
    lines = []
    runner = rehearsal.Rehearsal(job, str(tmp_path / "rehearsal"), str(tmp_path), log=lines.append)
    runner.run("job-1")
    (artifact,) = runner.store.artifacts
    assert (artifact.uri, artifact.schema_title) == ("gs://bucket/schema", "tfx.Schema")
    assert "schema-importer" in lines[0] and "ran in" in lines[0]


def test_a_placeholder_the_rehearsal_does_not_fill_is_an_error_not_passed_through(tmp_path):
    job = {"runtimeConfig": {"gcsOutputDirectory": "gs://bucket/root"}, "pipelineSpec": {
        "root": {"dag": {"tasks": {"task": {"componentRef": {"name": "task"}}}}},
        "components": {"task": {"executorLabel": "task_executor"}},
        "deploymentSpec": {"executors": {"task_executor": {"container": {
            "image": "i", "command": ["python", "-c"],
            "args": ["pass", "{{$}}", "--x={{$.inputs.parameters['x']}}"]}}}}}}
    runner = rehearsal.Rehearsal(job, str(tmp_path / "rehearsal"), str(tmp_path), log=lambda line: None)
    with pytest.raises(rehearsal.RehearsalError, match="placeholders the rehearsal does not fill"):
        runner.run("job-1")
