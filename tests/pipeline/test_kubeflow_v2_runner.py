"""Tests of the Kubeflow Pipelines v2 / Vertex AI compile: `make pipeline-compile` writes a
PipelineJob whose spec parses, with the expected tasks, their dependencies, the pipeline image,
Dataflow for the Beam components and a GPU worker pool for the Trainer. Nothing is submitted."""

import json
import os
import subprocess

import pytest
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from tests.paths import REPO_ROOT

pytestmark = pytest.mark.slow
IMAGE = "us-docker.pkg.dev/my-project/pipelines/flickr8k-captioning:v1"
WEIGHTS = "gs://my-bucket/weights/resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5"
GLOVE = "gs://my-bucket/glove/glove.6B.zip"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("kfp_out")
    subprocess.run(["make", "--no-print-directory", "pipeline-compile", f"OUTPUT_DIR={output_dir}",
                    "PROJECT=my-project", "REGION=europe-west4", "BUCKET=my-bucket", f"IMAGE={IMAGE}",
                    f"RESNET_WEIGHTS={WEIGHTS}", f"GLOVE={GLOVE}",
                    "SET=cloud.trainer_accelerator_type=NVIDIA_L4 cloud.trainer_accelerator_count=4"],
                   cwd=REPO_ROOT, check=True, capture_output=True, timeout=600)
    with open(output_dir / "kfp" / "flickr8k-captioning.json", encoding="utf-8") as stream:
        return json.load(stream)


def test_pipeline_job_parses_with_every_task_and_dependency(compiled):
    spec = json_format.ParseDict(compiled["pipelineSpec"], pipeline_spec_pb2.PipelineSpec(),
                                 ignore_unknown_fields=False)
    # Schema 2.1: executors read ExecutorInput.inputs.parameterValues (what KFP v2 launchers fill)
    # with the inputs spec on their command line, not the deprecated inputs.parameters.
    assert spec.schema_version == "2.1.0"
    for name, executor in compiled["pipelineSpec"]["deploymentSpec"]["executors"].items():
        if "container" in executor:
            assert "--json_serialized_inputs_spec_args" in executor["container"]["args"], name
    assert spec.pipeline_info.name == "flickr8k-captioning"
    assert compiled["runtimeConfig"]["gcsOutputDirectory"] == "gs://my-bucket/pipeline_root"
    tasks = spec.root.dag.tasks
    expected_dependencies = {
        "Flickr8kExampleGen": set(),
        "StatisticsGen": {"Flickr8kExampleGen"},
        "ImportSchemaGen": set(),
        "ExampleValidator": {"StatisticsGen", "ImportSchemaGen"},
        "ExampleValidationGate": {"StatisticsGen", "ExampleValidator"},
        "Transform": {"Flickr8kExampleGen", "ImportSchemaGen", "ExampleValidationGate"},
        "Trainer": {"Transform"},
        "latest_blessed_model_resolver-model-resolver": set(),
        "latest_blessed_model_resolver-model-blessing-resolver": set(),
        "CaptionEvaluator": {"Flickr8kExampleGen", "Trainer",
                             "latest_blessed_model_resolver-model-resolver"},
        "Pusher": {"Trainer", "CaptionEvaluator"},
    }
    assert {name: set(task.dependent_tasks) for name, task in tasks.items()} == expected_dependencies
    pusher_inputs = tasks["Pusher"].inputs.artifacts
    assert pusher_inputs["model_blessing"].task_output_artifact.producer_task == "CaptionEvaluator"


def test_every_component_runs_the_pipeline_image_and_beam_runs_on_dataflow(compiled):
    executors = compiled["pipelineSpec"]["deploymentSpec"]["executors"]
    containers = {name: executor["container"] for name, executor in executors.items()
                  if "container" in executor}
    assert len(containers) == 9 and all(container["image"] == IMAGE for container in containers.values())
    transform_args = containers["Transform_executor"]["args"]
    for expected in ("--runner=DataflowRunner", "--project=my-project", "--region=europe-west4",
                     "--temp_location=gs://my-bucket/tmp", f"--sdk_container_image={IMAGE}"):
        assert expected in transform_args
    schema_task = compiled["pipelineSpec"]["root"]["dag"]["tasks"]["ImportSchemaGen"]
    assert "/pipeline/schemas/schema.pbtxt" in json.dumps(schema_task)


def test_trainer_is_a_vertex_training_job_on_a_gpu_worker_pool(compiled):
    executor = compiled["pipelineSpec"]["deploymentSpec"]["executors"]["Trainer_executor"]["container"]
    assert "tfx.extensions.google_cloud_ai_platform.trainer.executor.GenericExecutor" in executor["args"]
    task = compiled["pipelineSpec"]["root"]["dag"]["tasks"]["Trainer"]
    custom_config = json.loads(
        task["inputs"]["parameters"]["custom_config"]["runtimeValue"]["constant"])
    assert custom_config["ai_platform_enable_vertex"] is True
    assert custom_config["required_gpus"] == 4  # run_fn fails if the job's machine shows fewer
    assert custom_config["ai_platform_vertex_region"] == "europe-west4"
    (pool,) = custom_config["ai_platform_training_args"]["worker_pool_specs"]
    assert pool["machine_spec"] == {"machine_type": "n1-standard-16", "accelerator_type": "NVIDIA_L4",
                                    "accelerator_count": 4}
    assert pool["container_spec"]["image_uri"] == IMAGE and pool["replica_count"] == 1
    assert custom_config["backup_root"] == "gs://my-bucket/pipeline_root/_trainer_backup"
    # The Trainer's slice of the config, and the data bucket default reaching ingestion.
    assert set(json.loads(custom_config["pipeline_config"])) == {"trainer", "export", "features"}
    ingestion = compiled["pipelineSpec"]["root"]["dag"]["tasks"]["Flickr8kExampleGen"]
    ingestion_config = json.loads(
        ingestion["inputs"]["parameters"]["pipeline_config"]["runtimeValue"]["constant"])
    assert ingestion_config["data"]["data_dir"] == "gs://my-bucket/flickr8k"


def _compiled_tasks(tmp_path, name, *overrides):
    from pipeline import kubeflow_v2_runner

    args = kubeflow_v2_runner._parse_args(["compile", "--project=my-project", "--bucket=my-bucket",
                                           f"--resnet_weights={WEIGHTS}",
                                           *[f"--set={override}" for override in overrides]])
    path = kubeflow_v2_runner.compile_pipeline(kubeflow_v2_runner.build_config(args),
                                               str(tmp_path / f"{name}.json"), fingerprint_data=False)
    with open(path, encoding="utf-8") as stream:
        spec = json.load(stream)["pipelineSpec"]
    return {task: json.dumps([body, spec["deploymentSpec"]["executors"].get(
        body["componentRef"]["name"].replace("comp-", "") + "_executor")], sort_keys=True)
        for task, body in spec["root"]["dag"]["tasks"].items()}


def test_an_evaluation_setting_changes_only_the_evaluator_task(tmp_path):
    before = _compiled_tasks(tmp_path, "before")
    after = _compiled_tasks(tmp_path, "after", "evaluation.beam_width=2")
    assert {task for task in before if before[task] != after[task]} == {"CaptionEvaluator"}
    assert _compiled_tasks(tmp_path, "again") == before  # compiling is deterministic


def test_the_compiled_json_holds_no_path_of_the_machine_that_compiled_it(compiled):
    text = json.dumps(compiled)
    for local in (str(REPO_ROOT), os.path.expanduser("~") + "/", '"/tmp/', "=/tmp/"):
        assert local not in text
    assert WEIGHTS in text and GLOVE in text


@pytest.mark.parametrize("flags, named", [
    (["--data_dir=/home/me/Flickr8k"], ["data.data_dir", "'/home/me/Flickr8k'"]),
    (["--glove=glove.6B.zip"], ["transform.glove_path", "gs://BUCKET"]),
    (["--resnet_weights=/keras/resnet50_notop.h5"], ["features.resnet_weights", "a path of this machine"]),
    ([], ["features.resnet_weights is 'random'", "cloud.allow_random_resnet_weights=true"]),
    (["--resnet_weights=imagenet"], ["'imagenet'", "does not hold it",
                                     "resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5"]),
])
def test_compile_refuses_what_cannot_work_on_the_cloud_and_names_it(tmp_path, capsys, flags, named):
    from pipeline import kubeflow_v2_runner

    output_file = tmp_path / "pipeline.json"
    weights = [] if any(flag.startswith("--resnet_weights") for flag in flags) or not flags \
        else [f"--resnet_weights={WEIGHTS}"]
    status = kubeflow_v2_runner.main(["compile", "--bucket=my-bucket", f"--output_file={output_file}",
                                      "--no_data_fingerprint", *weights, *flags])
    assert status == 2 and not output_file.exists()
    error = capsys.readouterr().err
    for text in named:
        assert text in error
    assert "Traceback" not in error


def test_random_weights_compile_when_a_setting_says_it_is_a_smoke_run(tmp_path):
    from pipeline import kubeflow_v2_runner

    output_file = tmp_path / "pipeline.json"
    assert kubeflow_v2_runner.main(["compile", "--bucket=my-bucket", f"--output_file={output_file}",
                                    "--no_data_fingerprint",
                                    "--set=cloud.allow_random_resnet_weights=true"]) == 0
    assert output_file.exists()


def test_compile_prints_where_the_json_went_and_nothing_of_tensorflows_start_up(tmp_path):
    import sys

    completed = subprocess.run(
        [sys.executable, "-m", "pipeline.kubeflow_v2_runner", "compile", "--bucket=my-bucket",
         f"--output_file={tmp_path / 'pipeline.json'}", f"--resnet_weights={WEIGHTS}",
         "--no_data_fingerprint"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.splitlines()[0] == f"Pipeline JSON: {tmp_path / 'pipeline.json'}"
    assert len(completed.stdout.splitlines()) == 2
    # Only the warning that concerns the user's data: the cache key holds the data path alone.
    (warning,) = completed.stderr.strip().splitlines()
    assert "Data fingerprint not computed" in warning
