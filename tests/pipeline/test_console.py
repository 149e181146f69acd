"""Tests of the run's console: per-node lines, the log file, the failure paragraph."""

import io
import os

from absl import logging

from pipeline import console


def test_node_lines_say_ran_or_cached_from_tfx_messages():
    printed = io.StringIO()
    lines = console.NodeLines(printed)
    logging.set_verbosity(logging.INFO)
    logging.get_absl_logger().addHandler(lines)
    try:
        logging.info("Component %s is running.", "Transform")
        assert lines.running == "Transform"
        logging.info("Component %s is finished.", "Transform")
        logging.info("Component %s is running.", "Trainer")
        logging.info("A cached execution %d is used.", 7)
        logging.info("Component %s is finished.", "Trainer")
        logging.info("Component %s is running.", "Pusher")
    finally:
        logging.get_absl_logger().removeHandler(lines)
    assert [line.split()[:2] for line in printed.getvalue().splitlines()] == [
        ["Transform", "ran"], ["Trainer", "cached"]]
    assert lines.running == "Pusher"  # the node a failure paragraph would name


def test_the_log_file_gets_python_logging_and_fd_2_and_the_console_gets_neither(tmp_path):
    printed = io.StringIO()
    with console.run_log(str(tmp_path), console=printed) as run:
        logging.warning("a TFX message")
        os.write(2, b"a C++ warning on standard error\n")
    os.write(2, b"")  # fd 2 is usable again
    with open(run.log_path, encoding="utf-8") as log:
        logged = log.read()
    assert "a TFX message" in logged and "a C++ warning on standard error" in logged
    assert printed.getvalue() == f"Log: {run.log_path}\n"
    assert os.path.dirname(run.log_path) == str(tmp_path / console.LOGS_DIR)
    # After the block, nothing more goes to that file.
    logging.warning("after the run")
    with open(run.log_path, encoding="utf-8") as log:
        assert "after the run" not in log.read()


def test_failure_paragraph_is_one_line_of_error_and_the_log_path():
    error = ValueError("first line\n  second line\n" + "x" * 2000)
    paragraph = console.failure_paragraph(error, "Transform", "/out/logs/run.log").splitlines()
    assert paragraph[0].startswith("FAILED in Transform: ValueError: first line second line xxx")
    assert paragraph[0].endswith(" ...") and len(paragraph[0]) < 700
    assert paragraph[1] == "The full log, with the traceback: /out/logs/run.log"
    assert console.failure_paragraph(OSError("no disk"), None, "l").startswith(
        "FAILED before any pipeline node ran: OSError: no disk")
