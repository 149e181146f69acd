"""What a local run shows: one line per pipeline node, the summary, and the full log in a file.

By default (``make pipeline-local``) everything TFX, TensorFlow and Beam log
goes, complete, to ``OUTPUT_DIR/logs/<run id>.log`` and not to the console:
Python logging through a file handler, and whatever C++ code and Beam's worker
processes write to standard error through that file descriptor, redirected to
the same file for the run. The console gets the log's path, a line per node as
it finishes (its name, whether it ran or was cached, seconds) and the runner's
summary; a failing run ends with one paragraph naming the failing node and its
error, and the log's path. ``--verbose`` (``make ... VERBOSE=1``) leaves the
console logging as it was and still writes the per-node lines.

The per-node lines come from the messages TFX's ``LocalDagRunner`` and launcher
log for each node (``Component %s is running.`` / ``A cached execution %d is
used.`` / ``Component %s is finished.``): TFX has no other hook for them.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import sys
import time
from typing import Iterator, Optional, TextIO

from absl import logging as absl_logging

LOGS_DIR = "logs"
_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(filename)s:%(lineno)d] %(message)s"


class NodeLines(logging.Handler):
    """Writes ``<node>  ran|cached  <seconds> s`` to ``console`` as each node finishes."""

    def __init__(self, console: TextIO):
        super().__init__(level=logging.INFO)
        self._console = console
        self.running: Optional[str] = None  # the node running now (for the failure paragraph)
        self.log_path = ""
        self._started = 0.0
        self._cached = False

    def emit(self, record: logging.LogRecord) -> None:
        message, args = record.msg, record.args
        if message == "Component %s is running.":
            self.running, self._started, self._cached = str(args[0]), time.monotonic(), False
        elif message == "A cached execution %d is used.":
            self._cached = True
        elif message == "Component %s is finished." and self.running:
            state = "cached" if self._cached else "ran"
            seconds = time.monotonic() - self._started
            self._console.write(f"  {self.running:<34} {state:>6} {seconds:8.1f} s\n")
            self._console.flush()
            self.running = None


def new_log_path(output_dir: str) -> str:
    run_id = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{os.getpid()}"
    return os.path.join(os.path.abspath(output_dir), LOGS_DIR, f"{run_id}.log")


@contextlib.contextmanager
def run_log(output_dir: str, verbose: bool = False, console: Optional[TextIO] = None
            ) -> Iterator[NodeLines]:
    """For the ``with`` block: the log file (and, unless ``verbose``, only the log file) gets
    everything logged; yields the :class:`NodeLines` handler writing to ``console``."""
    console = console or sys.stdout
    log_path = new_log_path(output_dir)
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    console.write(f"Log: {log_path}\n")
    console.flush()
    root = logging.getLogger()
    file_handler = logging.FileHandler(log_path, encoding="utf-8")
    file_handler.setFormatter(logging.Formatter(_LOG_FORMAT))
    node_lines = NodeLines(console)
    node_lines.log_path = log_path
    absl_handler = absl_logging.get_absl_handler()
    absl_level = absl_handler.level
    saved_stderr = None
    root.addHandler(file_handler)
    logging.getLogger("absl").addHandler(node_lines)
    try:
        if not verbose:
            absl_handler.setLevel(logging.CRITICAL + 1)  # Python logging: the file handler only
            sys.stderr.flush()
            saved_stderr = os.dup(2)
            with open(log_path, "ab", buffering=0) as raw_log:
                os.dup2(raw_log.fileno(), 2)  # C++ logs and Beam workers' output
        yield node_lines
    finally:
        if saved_stderr is not None:
            sys.stderr.flush()
            os.dup2(saved_stderr, 2)
            os.close(saved_stderr)
        absl_handler.setLevel(absl_level)
        logging.getLogger("absl").removeHandler(node_lines)
        root.removeHandler(file_handler)
        file_handler.close()


def failure_paragraph(error: BaseException, node: Optional[str], log_path: str) -> str:
    """One paragraph: where the run failed, the error (its own message, trimmed), the log."""
    message = " ".join(str(error).split())
    if len(message) > 600:
        message = message[:600] + " ..."
    where = f"in {node}" if node else "before any pipeline node ran"
    return (f"FAILED {where}: {type(error).__name__}: {message}\n"
            f"The full log, with the traceback: {log_path}")
