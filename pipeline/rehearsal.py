"""Vertex dress rehearsal: ``make pipeline-rehearse`` executes the compiled pipeline here.

It compiles the pipeline through the same code path as ``make pipeline-compile``
(:func:`pipeline.kubeflow_v2_runner.compile_pipeline`), then executes every task
of the compiled PipelineJob JSON in the DAG's order, as Vertex AI Pipelines would:

* each **container task** runs its executor's exact command and args in a fresh
  process, ``{{$}}`` replaced by an ExecutorInput built the way Vertex's launcher
  builds it (input artifacts with their resource names, types, URIs and
  metadata; parameters in ``parameterValues`` only; output artifacts under
  ``<pipeline_root>/<project number>/<job>/<task>_<id>/<key>``; ``outputFile``);
  the process's working directory is a copy of what the ``Dockerfile`` copies
  into the image, and its ``PYTHONPATH`` holds only that copy;
* the **resolver** tasks (latest blessed model) evaluate the spec's own
  ``outputArtifactQueries`` filters over the artifacts the rehearsal recorded,
  across runs, as Vertex ML Metadata would; **importer** tasks register their
  artifact URI;
* the **Vertex AI Trainer** task runs its exact command too, but the CustomJob it
  submits runs locally (:mod:`pipeline.rehearsal_custom_job`): the job's
  container command, as TFX built it, in a fresh process of the same image copy;
* Beam runs on DirectRunner (``cloud.dataflow=false``), and ``gs://`` is a folder:
  ``gs://BUCKET/...`` is ``OUTPUT_DIR/rehearsal/gcs/BUCKET/...``.

With no settings it rehearses a tiny generated demo twice, so the second
evaluator gets the first run's blessed model from the resolver. What a
rehearsal cannot show: GCS semantics (list-after-write, object renames),
Dataflow workers, GPUs, Vertex's own cache and quotas (README "Kubeflow
Pipelines / Vertex AI").

    python -m pipeline.rehearsal [--output_dir=outputs] [--runs=2] [--set section.field=value ...]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
import warnings
from typing import Dict, List, Optional, Sequence

from components import config as config_lib
from pipeline import config_flags
from pipeline.kubeflow_v2_runner import IMAGE_WORKDIR

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUCKET = "rehearsal-bucket"
PROJECT = "rehearsal-project"
PROJECT_NUMBER = "123456789012"
REGION = "us-central1"
GCS_SCHEME = "gs://"
# The Vertex AI Trainer's executor: its CustomJob is run locally by pipeline.rehearsal_custom_job.
VERTEX_TRAINER_EXECUTOR = "tfx.extensions.google_cloud_ai_platform.trainer.executor"
# A tiny demo that trains, evaluates and is blessed honestly (the default blessing rules) in a
# few minutes on 2 cores, the same way each time: enough dev images that one caption set cannot
# decide BLEU-4, and op determinism (why these sizes, measured over seeds: README "Dress
# rehearsal").
DEMO_SETTINGS = {
    "data.demo_num_images": "60",
    "data.demo_seed": "8",
    "data.demo_split_fractions": "0.6,0.25,0.15",
    "transform.vocab_frequency_threshold": "1",
    "trainer.epochs": "20",
    "trainer.per_replica_batch_size": "32",
    "trainer.warmup_steps": "5",
    "trainer.learning_rate": "0.003",
    "trainer.learning_rate_batch_size": "32",  # one CPU replica: the rate as given
    "trainer.image_dense_units": "128,64",
    "trainer.lstm_units": "128",
    "trainer.second_lstm_units": "64",
    "trainer.attention_key_dim": "32",
    "trainer.deterministic": "true",
    "evaluation.with_meteor": "false",
    "evaluation.report_images": "2",
}
# What the rehearsal always sets: Beam on DirectRunner, the Trainer on Vertex (run locally) with
# no GPU, its own bucket and project, and random ResNet50 weights explicitly allowed (no weights
# file here).
REHEARSAL_SETTINGS = {
    "cloud.dataflow": "false",
    "cloud.vertex_training": "true",
    "cloud.project": PROJECT,
    "cloud.region": REGION,
    "cloud.bucket": BUCKET,
    "cloud.allow_random_resnet_weights": "true",
    # No GPU here: the CustomJob asks for none (a job asking for GPUs fails where none is visible).
    "cloud.trainer_accelerator_count": "0",
}


class RehearsalError(RuntimeError):
    """A task failed or the spec holds something the rehearsal cannot execute."""


@dataclasses.dataclass
class Artifact:
    """An artifact as Vertex ML Metadata holds it (``gs://`` URIs, JSON metadata)."""

    name: str
    schema_title: str
    instance_schema: str
    uri: str
    metadata: dict
    state: str = "LIVE"
    created: float = 0.0

    def runtime_artifact(self) -> dict:
        """The ``RuntimeArtifact`` JSON of an ExecutorInput."""
        return {"name": self.name, "type": {"instanceSchema": self.instance_schema},
                "uri": self.uri, "metadata": self.metadata}


class ArtifactStore:
    """The artifacts of every rehearsal run under one output folder, kept in a JSON file."""

    def __init__(self, path: str):
        self.path = path
        self.lock = threading.Lock()
        self.artifacts: List[Artifact] = []
        # Cache key → the output artifacts' names of the execution that had it.
        self.executions: Dict[str, Dict[str, List[str]]] = {}
        if os.path.exists(path):
            with open(path, encoding="utf-8") as stream:
                saved = json.load(stream)
            self.artifacts = [Artifact(**values) for values in saved["artifacts"]]
            self.executions = saved["executions"]

    def add(self, artifact: Artifact) -> None:
        with self.lock:
            self.artifacts.append(artifact)
            self._save()

    def add_execution(self, key: str, output_names: Dict[str, List[str]]) -> None:
        with self.lock:
            self.executions[key] = output_names
            self._save()

    def by_name(self, name: str) -> Artifact:
        (artifact,) = [artifact for artifact in self.artifacts if artifact.name == name]
        return artifact

    def _save(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path, "w", encoding="utf-8") as stream:
            json.dump({"artifacts": [dataclasses.asdict(item) for item in self.artifacts],
                       "executions": self.executions}, stream, indent=1)

    def query(self, filter_text: str) -> List[Artifact]:
        """The artifacts matching a resolved Vertex ML Metadata filter, newest first."""
        clauses = [parse_clause(clause) for clause in re.split(r"\s+AND\s+", filter_text.strip())]
        matches = [artifact for artifact in self.artifacts
                   if all(clause_matches(artifact, *clause) for clause in clauses)]
        return sorted(matches, key=lambda artifact: artifact.created, reverse=True)


_CLAUSE = re.compile(r'^(?P<field>[A-Za-z_][\w.]*)\s*=\s*(?P<value>"(?:[^"\\]|\\.)*"|[^\s"]+)$')


def parse_clause(clause: str) -> tuple:
    """``field=value`` of an ML Metadata filter, the value unquoted or a number."""
    match = _CLAUSE.match(clause.strip())
    if not match:
        raise RehearsalError(f"Cannot evaluate the filter clause {clause!r}.")
    value = match.group("value")
    if value.startswith('"'):
        return match.group("field"), json.loads(value)
    try:
        return match.group("field"), float(value)
    except ValueError:
        return match.group("field"), value


def clause_matches(artifact: Artifact, field: str, value) -> bool:
    if field == "schema_title":
        return artifact.schema_title == value
    if field == "state":
        return artifact.state == value
    if field == "name":
        return artifact.name == value
    if field.startswith("metadata."):
        # metadata.<key>.number_value / string_value / bool_value
        _, key, kind = field.split(".", 2)
        if key not in artifact.metadata:
            return False
        actual = artifact.metadata[key]
        if kind == "number_value":
            return isinstance(actual, (int, float)) and not isinstance(actual, bool) and \
                float(actual) == float(value)
        if kind == "string_value":
            return isinstance(actual, str) and actual == value
        if kind == "bool_value":
            return isinstance(actual, bool) and str(actual).lower() == str(value).lower()
    raise RehearsalError(f"Cannot evaluate the filter field {field!r}.")


_INPUT_METADATA = re.compile(
    r"\{\{\$\.inputs\.artifacts\['(?P<input>[^']+)'\]\.metadata\['(?P<key>[^']+)'\]\}\}")


def resolve_filter(filter_text: str, inputs: Dict[str, List[Artifact]]) -> Optional[str]:
    """The filter with its ``{{$.inputs.artifacts['x'].metadata['y']}}`` placeholders filled in;
    None when an input it reads has no artifact (the query then matches nothing)."""
    missing = []

    def value(match) -> str:
        artifacts = inputs.get(match.group("input")) or []
        if not artifacts or match.group("key") not in artifacts[0].metadata:
            missing.append(match.group(0))
            return ""
        found = artifacts[0].metadata[match.group("key")]
        return str(int(found)) if isinstance(found, float) and found.is_integer() else str(found)

    resolved = _INPUT_METADATA.sub(value, filter_text)
    if "{{" in resolved:
        raise RehearsalError(f"Cannot resolve the placeholders of the filter {filter_text!r}.")
    return None if missing else resolved


def title_of(instance_schema: str) -> str:
    match = re.search(r"^title:\s*(\S+)", instance_schema, re.MULTILINE)
    return match.group(1) if match else "system.Artifact"


def upstream_tasks(spec: dict) -> Dict[str, set]:
    """Each root-DAG task's upstream: the tasks it depends on or takes artifacts from (the
    compiled resolver's second phase names its first only through its input artifact)."""
    return {name: set(task.get("dependentTasks", [])) | {
        source["taskOutputArtifact"]["producerTask"]
        for source in task.get("inputs", {}).get("artifacts", {}).values()
        if "taskOutputArtifact" in source} for name, task in spec["root"]["dag"]["tasks"].items()}


def task_order(spec: dict) -> List[str]:
    """The root DAG's tasks, each after its :func:`upstream_tasks`."""
    tasks = spec["root"]["dag"]["tasks"]
    upstream = upstream_tasks(spec)
    order, done = [], set()
    while len(order) < len(tasks):
        ready = sorted(name for name in tasks if name not in done and upstream[name] <= done)
        if not ready:
            raise RehearsalError(f"The DAG has a cycle among {sorted(set(tasks) - done)}.")
        order.extend(ready)
        done.update(ready)
    return order


def parameter_values(task: dict) -> dict:
    """The task's constant parameters as ``parameterValues`` JSON (schema 2.1's ``constant``)."""
    values = {}
    for name, source in task.get("inputs", {}).get("parameters", {}).items():
        runtime_value = source.get("runtimeValue", {})
        if "constant" in runtime_value:
            values[name] = runtime_value["constant"]
        elif "constantValue" in runtime_value:  # schema 2.0
            (values[name],) = runtime_value["constantValue"].values()
        else:
            raise RehearsalError(f"Parameter {name!r} of the task has no constant value: {source}")
    return values


def cache_key(task: dict, component: dict, container: dict, inputs: Dict[str, List[Artifact]]) -> str:
    """KFP's execution cache key, as its launcher computes it (``cacheutils.GenerateCacheKey``):
    the input artifacts' names, the parameter values, the output definitions and the container
    (image, command, args). A task whose inputs are new artifacts is never a cache hit."""
    key = {
        "inputArtifactNames": {name: [artifact.name for artifact in artifacts]
                               for name, artifacts in sorted(inputs.items())},
        "inputParameterValues": parameter_values(task),
        "outputArtifactsSpec": component.get("outputDefinitions", {}).get("artifacts", {}),
        "outputParametersSpec": component.get("outputDefinitions", {}).get("parameters", {}),
        "containerSpec": {"image": container.get("image"), "cmdArgs": [
            *container.get("command", []), *container.get("args", [])]},
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode("utf-8")).hexdigest()


def copy_image_tree(dockerfile: str, destination: str) -> str:
    """A copy of what the Dockerfile's ``COPY`` lines put in the image's working directory."""
    if os.path.exists(destination):
        shutil.rmtree(destination)
    os.makedirs(destination)
    context = os.path.dirname(dockerfile)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    with open(dockerfile, encoding="utf-8") as stream:
        for line in stream:
            words = line.split()
            if not words or words[0] != "COPY":
                continue
            *sources, target = words[1:]
            for source in sources:
                origin = os.path.join(context, source)
                if os.path.isdir(origin):
                    shutil.copytree(origin, os.path.join(destination, target), ignore=ignore,
                                    dirs_exist_ok=True)
                else:
                    target_dir = os.path.join(destination, target)
                    os.makedirs(target_dir, exist_ok=True)
                    shutil.copy2(origin, target_dir)
    return destination


class Rehearsal:
    """Executes a compiled PipelineJob's tasks one run at a time (see the module docstring)."""

    def __init__(self, pipeline_job: dict, root: str, image_dir: str, log=print, parallelism: int = 2):
        self.parallelism = parallelism
        self.use(pipeline_job)
        self.root = root
        self.gcs_dir = os.path.join(root, "gcs")
        self.image_dir = image_dir
        self.store = ArtifactStore(os.path.join(root, "metadata.json"))
        self._log = log
        self._log_lock = threading.Lock()

    def log(self, line: str) -> None:
        """One task line; tasks finishing together on two threads print whole lines."""
        with self._log_lock:
            self._log(line)
            sys.stdout.flush()

    def use(self, pipeline_job: dict) -> None:
        """The compiled PipelineJob the next runs execute."""
        self.job = pipeline_job
        self.spec = pipeline_job["pipelineSpec"]

    # gs://BUCKET/... <-> OUTPUT_DIR/rehearsal/gcs/BUCKET/...; the image's working directory
    # (an absolute path at the start of a value) <-> the image copy.
    def to_local(self, text: str) -> str:
        text = re.sub(r'(?<=["=])' + re.escape(IMAGE_WORKDIR + "/"), self.image_dir + "/", text)
        return text.replace(GCS_SCHEME, self.gcs_dir + "/")

    def to_gcs(self, text: str) -> str:
        return text.replace(self.gcs_dir + "/", GCS_SCHEME)

    def environment(self) -> dict:
        """The task processes' environment: this machine's, with the image copy as PYTHONPATH."""
        environment = {name: value for name, value in os.environ.items()
                       if not name.startswith(("PYTHON", "CAPTIONING_", "VIRTUAL_ENV", "TF_CPP_"))}
        environment["PYTHONPATH"] = self.image_dir
        return environment

    def python_command(self, command: List[str]) -> List[str]:
        return [sys.executable, *command[1:]] if command and command[0] == "python" else command

    def check_image_copy_is_imported(self) -> None:
        """The task processes import this package from the image copy, not from the checkout."""
        probe = subprocess.run(
            [sys.executable, "-c", "import components, pipeline; print(components.__file__); "
                                   "print(pipeline.__file__)"],
            cwd=self.image_dir, env=self.environment(), capture_output=True, text=True, check=True)
        for path in probe.stdout.split():
            if not os.path.abspath(path).startswith(os.path.abspath(self.image_dir) + os.sep):
                raise RehearsalError(f"The task processes import {path}, not the image copy "
                                     f"{self.image_dir}.")

    def run(self, job_id: str) -> Dict[str, str]:
        """Executes every task once, tasks whose inputs are ready at the same time concurrently
        (as Vertex does, at most ``parallelism``); returns each task's line. Raises on the first
        failure, after the tasks already started have finished."""
        outputs: Dict[str, Dict[str, List[Artifact]]] = {}
        lines: Dict[str, str] = {}
        order = task_order(self.spec)
        upstream = upstream_tasks(self.spec)
        failure = None
        with concurrent.futures.ThreadPoolExecutor(self.parallelism) as pool:
            running = {}
            while len(outputs) < len(order) and failure is None:
                for name in order:
                    if name not in outputs and name not in running.values() and \
                            upstream[name] <= set(outputs) and len(running) < self.parallelism:
                        running[pool.submit(self.run_task, job_id, name, outputs)] = name
                done, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
                for future in done:
                    name = running.pop(future)
                    try:
                        outputs[name], lines[name] = future.result()
                    except Exception as error:  # reported once the running tasks are done
                        failure = failure or error
            concurrent.futures.wait(running)
        if failure is not None:
            raise failure
        return lines

    def run_task(self, job_id: str, task_name: str, outputs: Dict[str, Dict[str, List[Artifact]]]):
        """(the task's output artifacts, its line) for one task of one run."""
        task = self.spec["root"]["dag"]["tasks"][task_name]
        component = self.spec["components"][task["componentRef"]["name"]]
        executor = self.spec["deploymentSpec"]["executors"][component["executorLabel"]]
        inputs = {key: list(outputs[source["taskOutputArtifact"]["producerTask"]].get(
            source["taskOutputArtifact"]["outputArtifactKey"], []))
            for key, source in task.get("inputs", {}).get("artifacts", {}).items()}
        job_root = f"{self.job['runtimeConfig']['gcsOutputDirectory']}/{PROJECT_NUMBER}/{job_id}"
        task_dir = f"{job_root}/{task_name}_{uuid.uuid4().hex[:12]}"
        log_path = os.path.join(self.root, "logs", job_id, f"{task_name}.log")
        started = time.monotonic()
        try:
            if "container" in executor:
                key = cache_key(task, component, executor["container"], inputs)
                cached = self.store.executions.get(key) if task.get(
                    "cachingOptions", {}).get("enableCache") else None
                if cached is not None:
                    results = {output: [self.store.by_name(name) for name in names]
                               for output, names in cached.items()}
                    line = f"  {task_name:54} cached (outputs of an earlier run reused)"
                    self.log(line)
                    return results, line
                results = self.run_container(task_name, task, component, executor["container"],
                                             inputs, task_dir, log_path)
                self.store.add_execution(key, {output: [artifact.name for artifact in artifacts]
                                               for output, artifacts in results.items()})
                detail = ""
            elif "resolver" in executor:
                results = self.run_resolver(executor["resolver"], inputs)
                found = sum(len(artifacts) for artifacts in results.values())
                detail = f"  ({found} artifact{'s' * (found != 1)} found)"
            elif "importer" in executor:
                results = self.run_importer(component, executor["importer"])
                detail = ""
            else:
                raise RehearsalError(f"Task {task_name}: unknown executor kind {sorted(executor)}.")
        except Exception:
            self.log(f"  {task_name:54} FAILED after {time.monotonic() - started:.0f} s "
                     f"(log: {log_path})")
            raise
        line = f"  {task_name:54} ran in {time.monotonic() - started:4.0f} s{detail}"
        self.log(line)
        return results, line

    def new_name(self) -> str:
        return (f"projects/{PROJECT_NUMBER}/locations/{REGION}/metadataStores/default/artifacts/"
                f"{uuid.uuid4().int % 10**19}")

    def run_container(self, task_name: str, task: dict, component: dict, container: dict,
                      inputs: Dict[str, List[Artifact]], task_dir: str, log_path: str
                      ) -> Dict[str, List[Artifact]]:
        pending = {}
        for key, definition in component.get("outputDefinitions", {}).get("artifacts", {}).items():
            schema = definition["artifactType"]["instanceSchema"]
            pending[key] = Artifact(self.new_name(), title_of(schema), schema, f"{task_dir}/{key}", {})
        executor_input = {
            "inputs": {
                "artifacts": {key: {"artifacts": [artifact.runtime_artifact() for artifact in artifacts]}
                              for key, artifacts in inputs.items() if artifacts},
                "parameterValues": parameter_values(task),
            },
            "outputs": {
                "artifacts": {key: {"artifacts": [artifact.runtime_artifact()]}
                              for key, artifact in pending.items()},
                "outputFile": f"{task_dir}/executor_output.json",
            },
        }
        serialized = self.to_local(json.dumps(executor_input))
        unsupported = [arg for arg in container.get("args", []) if arg != "{{$}}" and "{{$" in arg]
        if unsupported:  # only the whole ExecutorInput is substituted, as TFX's tasks need
            raise RehearsalError(f"Task {task_name}: placeholders the rehearsal does not fill: "
                                 f"{unsupported}")
        args = [serialized if arg == "{{$}}" else self.to_local(arg) for arg in container.get("args", [])]
        command = self.python_command(container["command"])
        if any(arg.startswith(VERTEX_TRAINER_EXECUTOR) for arg in args):
            # The CustomJob this task submits runs here, from the same image copy.
            command = [sys.executable, "-m", "pipeline.rehearsal_custom_job", *command[1:]]
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        with open(log_path, "w", encoding="utf-8") as log_file:
            log_file.write(f"$ {' '.join(command)} {' '.join(args)}\n\n")
            log_file.flush()
            completed = subprocess.run([*command, *args], cwd=self.image_dir, env=self.environment(),
                                       stdout=log_file, stderr=subprocess.STDOUT, check=False)
        if completed.returncode != 0:
            raise RehearsalError(f"Task {task_name} exited with {completed.returncode}; its log: "
                                 f"{log_path}")
        output_file = self.to_local(executor_input["outputs"]["outputFile"])
        executor_output = {}
        if os.path.exists(output_file):
            with open(output_file, encoding="utf-8") as stream:
                executor_output = json.load(stream)
        results = {}
        for key, artifact in pending.items():
            written = executor_output.get("artifacts", {}).get(key, {}).get("artifacts", [])
            if written:
                artifact.uri = self.to_gcs(written[0].get("uri", artifact.uri))
                artifact.metadata = json.loads(self.to_gcs(json.dumps(written[0].get("metadata", {}))))
            artifact.created = time.time()
            self.store.add(artifact)
            results[key] = [artifact]
        return results

    def run_resolver(self, resolver: dict, inputs: Dict[str, List[Artifact]]
                     ) -> Dict[str, List[Artifact]]:
        results = {}
        for key, query in resolver["outputArtifactQueries"].items():
            filter_text = resolve_filter(query["filter"], inputs)
            matches = self.store.query(filter_text) if filter_text is not None else []
            results[key] = matches[:1]  # the newest match, as Vertex's resolver returns
        return results

    def run_importer(self, component: dict, importer: dict) -> Dict[str, List[Artifact]]:
        """Registers the importer's constant artifact URI as a new artifact (this pipeline has
        no importer task today: ImportSchemaGen is a container task)."""
        (key,) = component["outputDefinitions"]["artifacts"]
        schema = importer["typeSchema"].get("instanceSchema", "")
        source = importer["artifactUri"]
        if "constant" not in source and "constantValue" not in source:
            raise RehearsalError(f"An importer whose URI is not a constant: {source}")
        uri = source.get("constant", source.get("constantValue"))
        uri = uri if isinstance(uri, str) else uri.get("stringValue", "")
        artifact = Artifact(self.new_name(), title_of(schema), schema, uri,
                            dict(importer.get("metadata", {})), created=time.time())
        self.store.add(artifact)
        return {key: [artifact]}


def rehearsal_config(args: argparse.Namespace, demo_dir: str) -> config_lib.PipelineConfig:
    """The config to compile: the demo's settings unless others are given, the rehearsal's own
    cloud settings, and the demo data and GloVe file under the mapped bucket."""
    overrides = {} if args.set else dict(DEMO_SETTINGS)
    overrides.update(config_flags.parse_override_args(args.set))
    overrides.update(REHEARSAL_SETTINGS)
    pipeline_config = config_lib.PipelineConfig().with_overrides(overrides).validate()
    if not pipeline_config.data.data_dir:
        from components.ingestion import demo_data

        data = pipeline_config.data
        dataset = demo_data.generate(demo_dir, data.demo_num_images, data.demo_seed,
                                     data.demo_split_fractions)
        overrides.update({
            "data.data_dir": f"{GCS_SCHEME}{BUCKET}/demo_data",
            "transform.glove_path": f"{GCS_SCHEME}{BUCKET}/demo_data/glove/"
                                    f"{os.path.basename(dataset.glove_path)}"})
        pipeline_config = config_lib.PipelineConfig().with_overrides(overrides).validate()
    return pipeline_config


def _parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m pipeline.rehearsal", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="outputs", help="the rehearsal goes to OUTPUT_DIR/rehearsal")
    parser.add_argument("--runs", type=int, default=0,
                        help="pipeline runs (default: 2 with no --set, so the second evaluator gets "
                             "the first run's blessed model; 1 otherwise)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help="config overrides; none: the tiny demo (DEMO_SETTINGS)")
    return parser.parse_args(argv)


def evaluation_summary(rehearsal: Rehearsal, job_id: str) -> str:
    """The run's blessing verdict and the baseline model its evaluator received."""
    evaluations = [artifact for artifact in rehearsal.store.artifacts
                   if artifact.schema_title == "tfx.ModelEvaluation" and f"/{job_id}/" in artifact.uri]
    if not evaluations:
        return "no evaluation"
    with open(os.path.join(rehearsal.to_local(evaluations[-1].uri), "metrics.json"),
              encoding="utf-8") as stream:
        document = json.load(stream)
    baseline = document.get("baseline_model")
    return (f"{'BLESSED' if document['blessed'] else 'NOT BLESSED'} ({'; '.join(document['reasons'])}); "
            f"baseline model: {rehearsal.to_gcs(baseline) if baseline else 'none'}")


def main(argv: Optional[List[str]] = None) -> int:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    # The compile here imports TensorFlow; its start-up lines are not the rehearsal's news (each
    # task's own output, TensorFlow's included, goes to its log file).
    from components import quiet_startup

    quiet_startup.quiet()
    warnings.filterwarnings("ignore", category=UserWarning)
    from absl import logging

    from pipeline import kubeflow_v2_runner

    root = os.path.abspath(os.path.join(args.output_dir, "rehearsal"))
    if os.path.exists(root):
        shutil.rmtree(root)
    gcs_bucket_dir = os.path.join(root, "gcs", BUCKET)
    runs = args.runs or (1 if args.set else 2)
    logging.set_verbosity(logging.WARNING)
    try:
        pipeline_config = rehearsal_config(args, os.path.join(gcs_bucket_dir, "demo_data"))
    except (config_lib.ConfigError, ValueError) as error:
        print(error, file=sys.stderr)
        return 2
    started = time.monotonic()
    image_dir = copy_image_tree(os.path.join(REPO_ROOT, "Dockerfile"), os.path.join(root, "image"))
    rehearsal = None
    for run in range(1, runs + 1):
        # Each later run retrains with the next seed, as a user trying another one would: Vertex's
        # cache serves every task before the Trainer, and its evaluator gets a baseline model.
        run_config = dataclasses.replace(pipeline_config, trainer=dataclasses.replace(
            pipeline_config.trainer, seed=pipeline_config.trainer.seed + run - 1))
        spec_path = kubeflow_v2_runner.pipeline_file(dataclasses.replace(
            run_config.runtime, output_dir=os.path.join(root, f"run{run}")))
        compile_started = time.monotonic()
        try:
            kubeflow_v2_runner.compile_pipeline(run_config, spec_path, fingerprint_data=False)
        except kubeflow_v2_runner.CloudConfigError as error:
            print(error, file=sys.stderr)
            return 2
        with open(spec_path, encoding="utf-8") as stream:
            pipeline_job = json.load(stream)
        if rehearsal is None:
            rehearsal = Rehearsal(pipeline_job, root, image_dir)
            rehearsal.check_image_copy_is_imported()
            print(f"gs://{BUCKET}/ is {gcs_bucket_dir}/; each task runs in {image_dir}")
        rehearsal.use(pipeline_job)
        job_id = f"{pipeline_config.runtime.pipeline_name}-rehearsal-{run}"
        print(f"Run {run} of {runs} ({job_id}, trainer.seed={run_config.trainer.seed}): compiled "
              f"{spec_path} in {time.monotonic() - compile_started:.0f} s")
        try:
            rehearsal.run(job_id)
        except RehearsalError as error:
            print(f"Rehearsal failed: {error}", file=sys.stderr)
            log_path = str(error).rsplit("its log: ", 1)[-1]
            if os.path.exists(log_path):
                with open(log_path, encoding="utf-8", errors="replace") as stream:
                    tail = stream.read().splitlines()[-40:]
                print("\n".join(f"  | {line}" for line in tail), file=sys.stderr)
            return 1
        print(f"  evaluation: {evaluation_summary(rehearsal, job_id)}")
    print(f"Rehearsal passed: {runs} run{'s' * (runs != 1)} in {time.monotonic() - started:.0f} s; "
          f"task logs under {os.path.join(root, 'logs')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
