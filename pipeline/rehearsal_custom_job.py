"""The Vertex AI Trainer task of a rehearsal, with its CustomJob run on this machine.

``python -m pipeline.rehearsal_custom_job -m MODULE ARGS...`` runs ``python -m MODULE
ARGS...`` (the task's exact container command: TFX's Kubeflow v2 entrypoint with
the Vertex AI Trainer executor) in this process, with one change: TFX's
``VertexJobClient`` does not call the Vertex AI API. Where it would submit the
CustomJob, the job's first worker pool's container command (as TFX built it:
``python -m tfx.scripts.run_executor --executor_class_path ... --inputs ...``)
runs in a fresh process with this process's working directory and environment
(the image copy), and the job's state is that process's exit status. Everything
before (building the job from the task's ExecutorInput) and after (TFX's
polling loop, the ExecutorOutput) is TFX's own code.
"""

import runpy
import subprocess
import sys

from absl import logging

# The fake job id's prefix; a real one is projects/<project>/locations/<region>/customJobs/<id>.
LOCAL_JOB_PREFIX = "local-rehearsal-"


def _patch_vertex_job_client() -> None:
    from google.cloud.aiplatform_v1.types.job_state import JobState
    from tfx.extensions.google_cloud_ai_platform import training_clients

    client_class = training_clients.VertexJobClient

    def create_client(self) -> None:
        self._client = None

    def launch_job(self, project: str, training_job: dict) -> None:
        (pool, *_) = training_job["job_spec"]["worker_pool_specs"]
        container = pool["container_spec"]
        command = [*container["command"], *container.get("args", [])]
        if command[0] == "python":
            command[0] = sys.executable
        logging.warning("Rehearsal: running CustomJob %r locally (machine %s): %s ...",
                        training_job["display_name"], pool.get("machine_spec"), " ".join(command[:4]))
        completed = subprocess.run(command, check=False)
        self._job_name = (f"projects/{project}/locations/{self._region}/customJobs/"
                          f"{LOCAL_JOB_PREFIX}{training_job['display_name']}")
        self._local_state = (JobState.JOB_STATE_SUCCEEDED if completed.returncode == 0
                             else JobState.JOB_STATE_FAILED)
        self._local_returncode = completed.returncode

    def get_job(self):
        return {"name": self._job_name, "state": self._local_state.name,
                "exit_status": self._local_returncode}

    def get_job_state(self, response):
        del response
        return self._local_state

    client_class.create_client = create_client
    client_class.launch_job = launch_job
    client_class.get_job = get_job
    client_class.get_job_state = get_job_state


def main(argv) -> None:
    if len(argv) < 2 or argv[0] != "-m":
        raise SystemExit("usage: python -m pipeline.rehearsal_custom_job -m MODULE [ARGS...]")
    _patch_vertex_job_client()
    module = argv[1]
    sys.argv = [module, *argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
