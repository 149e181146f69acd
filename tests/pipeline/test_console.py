"""Tests of the run's console: per-node lines, progress, the log file, the failure paragraph."""

import io
import os
import re
import time

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


def _write_progress(directory, counts, total):
    """Progress as two worker processes' DoFn instances and the job would leave it."""
    from components.ingestion import progress

    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, progress.TOTAL_FILE), "w") as stream:
        stream.write(str(total))
    for worker, count in enumerate(counts):
        with open(os.path.join(directory, f"{1000 + worker}-abc{progress.COUNT_SUFFIX}"), "w") as stream:
            stream.write(str(count))


def _wait_for(condition, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def test_progress_off_a_terminal_is_plain_lines_of_images_done_rate_and_time_left(tmp_path):
    printed = io.StringIO()
    directory = str(tmp_path / "progress")
    display = console.ProgressDisplay(printed, directory, "Flickr8kExampleGen", on_terminal=False,
                                      plain_every_s=0.05, poll_s=0.01).start()
    try:
        time.sleep(0.1)
        assert printed.getvalue() == ""  # nothing before the job writes its total
        _write_progress(directory, [40, 0], 300)
        time.sleep(0.2)
        _write_progress(directory, [60, 60], 300)
        assert _wait_for(lambda: "120/300 images (40%)" in printed.getvalue())
    finally:
        display.stop()
    last = printed.getvalue().splitlines()[-1]
    assert re.fullmatch(r"    Flickr8kExampleGen: 120/300 images \(40%\), [0-9.]+ images/s, about \d+ s left",
                        last), last
    assert float(last.split(", ")[1].split()[0]) > 0  # measured from the first count seen


def test_progress_on_a_terminal_is_a_tqdm_bar_that_the_node_line_replaces(tmp_path):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    printed = Terminal()
    directory = str(tmp_path / "progress")
    lines = console.NodeLines(printed, directory)
    logging.set_verbosity(logging.INFO)
    logging.get_absl_logger().addHandler(lines)
    try:
        logging.info("Component %s is running.", "Flickr8kExampleGen")
        _write_progress(directory, [7, 5], 20)
        assert _wait_for(lambda: "12/20" in printed.getvalue())
        logging.info("Component %s is finished.", "Flickr8kExampleGen")
    finally:
        logging.get_absl_logger().removeHandler(lines)
        lines.close()
    bar, node_line = printed.getvalue().rsplit("\r", 1)[0], printed.getvalue().splitlines()[-1]
    assert "Flickr8kExampleGen" in bar and "images/s" in bar and "\r" in bar  # redrawn in place
    assert node_line.split()[:2] == ["Flickr8kExampleGen", "ran"]
    assert not os.path.exists(directory)  # the next node starts with no counts


def _drawn_on_a_pseudo_terminal(tmp_path, columns_rows) -> str:
    """What the ingestion display draws on a real pseudo-terminal of that size (0, 0: unsized)."""
    import fcntl
    import pty
    import struct
    import termios
    import threading

    master, replica = pty.openpty()
    if columns_rows != (0, 0):
        columns, rows = columns_rows
        fcntl.ioctl(replica, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    drawn = []

    def drain():  # a pseudo-terminal holds a few KB: read while the bar draws
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                return
            if not chunk:
                return
            drawn.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    terminal = os.fdopen(replica, "w", buffering=1)
    directory = str(tmp_path / f"progress_{columns_rows[0]}")
    lines = console.NodeLines(terminal, directory)  # isatty() says terminal: the tqdm bar
    logging.set_verbosity(logging.INFO)
    logging.get_absl_logger().addHandler(lines)
    try:
        logging.info("Component %s is running.", "Flickr8kExampleGen")
        _write_progress(directory, [30, 15], 300)
        _wait_for(lambda: b"45/300" in b"".join(drawn))
        logging.info("Component %s is finished.", "Flickr8kExampleGen")
    finally:
        logging.get_absl_logger().removeHandler(lines)
        lines.close()
        terminal.close()
        reader.join(timeout=5)
        os.close(master)
    return b"".join(drawn).decode("utf-8", "replace")


def test_the_bar_is_drawn_on_an_unsized_pseudo_terminal_and_fits_a_sized_one(tmp_path):
    """tqdm draws nothing on a 0x0 pseudo-terminal (``script`` without a terminal, ``docker
    exec -t``): the run showed no ingestion progress at all there until the display fell back
    to 80 columns."""
    unsized = _drawn_on_a_pseudo_terminal(tmp_path, (0, 0))
    assert "45/300" in unsized and "images/s" in unsized, repr(unsized)
    assert max(len(line) for line in unsized.split("\r")) <= 80
    sized = _drawn_on_a_pseudo_terminal(tmp_path, (60, 24))
    bars = [line for line in sized.split("\r") if "45/300" in line]
    assert bars and max(len(line) for line in bars) <= 60, repr(sized)
    assert "Flickr8kExampleGen" in sized.splitlines()[-1] and "ran" in sized.splitlines()[-1]
