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

While a node runs, :class:`ProgressDisplay` shows the progress its Beam job
reports through :mod:`components.ingestion.progress` (ingestion: images
finished of the total, images/s, time left): a tqdm bar on a terminal, a plain
line every half minute otherwise. The Trainer prints its own progress
(``run_fn.EpochProgress``: a line per epoch and, on a terminal, a bar over the
whole training).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import shutil
import sys
import threading
import time
from typing import Iterator, Optional, TextIO

from absl import logging as absl_logging

from components import terminal
from components.ingestion import progress

LOGS_DIR = "logs"
PLAIN_PROGRESS_EVERY_S = 30.0


class ProgressDisplay:
    """Polls a progress folder (:func:`components.ingestion.progress.read`) in a thread while
    a node runs; shows nothing until its job writes a total."""

    def __init__(self, console: TextIO, directory: str, label: str, on_terminal: bool,
                 plain_every_s: float = PLAIN_PROGRESS_EVERY_S, poll_s: float = 0.5):
        self._console, self._directory, self._label = console, directory, label
        self._on_terminal, self._plain_every_s, self._poll_s = on_terminal, plain_every_s, poll_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._poll, name=f"progress-{label}", daemon=True)
        self._bar = None
        self._first_seen = None  # (monotonic time, images done) when the total appeared
        self._last_plain = 0.0

    def start(self) -> ProgressDisplay:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()
        if self._bar is not None:
            self._bar.close()

    def _poll(self) -> None:
        while not self._stopped.wait(self._poll_s):
            done, total = progress.read(self._directory)
            if total is not None:
                self._show(done, total)

    def _show(self, done: int, total: int) -> None:
        now = time.monotonic()
        if self._first_seen is None:
            self._first_seen, self._last_plain = (now, done), now
        if self._on_terminal:
            if self._bar is None:
                # initial: the rate counts from here, not from a jump of everything done so far
                self._bar = terminal.progress_bar(self._console, total, self._label, "images",
                                                  initial=done)
            self._bar.n = done
            self._bar.refresh()
        elif now - self._last_plain >= self._plain_every_s:
            self._last_plain = now
            started, done_then = self._first_seen
            rate = (done - done_then) / max(now - started, 1e-9)
            left = f", about {(total - done) / rate:.0f} s left" if rate > 0 else ""
            self._console.write(f"    {self._label}: {done}/{total} images "
                                f"({100 * done / max(total, 1):.0f}%), {rate:.1f} images/s{left}\n")
            self._console.flush()


_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(filename)s:%(lineno)d] %(message)s"


class NodeLines(logging.Handler):
    """Writes ``<node>  ran|cached  <seconds> s`` to ``console`` as each node finishes, and
    with a ``progress_dir``, the running node's :class:`ProgressDisplay`."""

    def __init__(self, console: TextIO, progress_dir: Optional[str] = None,
                 on_terminal: Optional[bool] = None):
        super().__init__(level=logging.INFO)
        self._console = console
        self.running: Optional[str] = None  # the node running now (for the failure paragraph)
        self.log_path = ""
        self._started = 0.0
        self._cached = False
        self._progress_dir = progress_dir
        self._on_terminal = console.isatty() if on_terminal is None else on_terminal
        self._display: Optional[ProgressDisplay] = None

    def _stop_display(self) -> None:
        if self._display is not None:
            self._display.stop()
            self._display = None
            shutil.rmtree(self._progress_dir, ignore_errors=True)

    def close(self) -> None:
        self._stop_display()
        super().close()

    def emit(self, record: logging.LogRecord) -> None:
        message, args = record.msg, record.args
        if message == "Component %s is running.":
            self._stop_display()
            self.running, self._started, self._cached = str(args[0]), time.monotonic(), False
            if self._progress_dir:
                self._display = ProgressDisplay(self._console, self._progress_dir, self.running,
                                                self._on_terminal).start()
        elif message == "A cached execution %d is used.":
            self._cached = True
        elif message == "Component %s is finished." and self.running:
            self._stop_display()
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
    progress_dir = log_path[:-len(".log")] + ".progress"
    saved_progress_env = os.environ.get(progress.PROGRESS_DIR_ENV)
    os.environ[progress.PROGRESS_DIR_ENV] = progress_dir  # Beam's worker processes inherit it
    node_lines = NodeLines(console, progress_dir)
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
        node_lines.close()
        if saved_progress_env is None:
            os.environ.pop(progress.PROGRESS_DIR_ENV, None)
        else:
            os.environ[progress.PROGRESS_DIR_ENV] = saved_progress_env
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
