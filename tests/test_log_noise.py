"""The known-harmless TensorFlow noise is not produced at its source: reading records to the
end in the Trainer's feature statistics and the evaluator's split reader logs no
end-of-sequence rendezvous warning (an eager ``for`` loop over the same records does, which
shows the check can see it)."""

import os
import subprocess
import sys

import pytest

from tests.paths import REPO_ROOT

pytestmark = pytest.mark.slow

SCRIPT = """
import sys
import numpy as np
import tensorflow as tf
from components import example_format
from components.evaluation import split_captions
from components.trainer import inputs

root, mode = sys.argv[1], sys.argv[2]
split_dir = example_format.split_dir(root, "dev")
tf.io.gfile.makedirs(split_dir)
path = split_dir + "/data.tfrecord"
with tf.io.TFRecordWriter(path) as writer:
    for number in range(5):
        features = np.full((49, 2048), number, "<f2")
        writer.write(tf.train.Example(features=tf.train.Features(feature={
            example_format.IMAGE_ID: tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"i%d" % number])),
            example_format.IMAGE_FEATURES: tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[features.tobytes()])),
            example_format.CAPTIONS: tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"a cat ."])),
            example_format.CAPTION_IDS: tf.train.Feature(int64_list=tf.train.Int64List(value=[1, 5, 2, 0])),
        })).SerializeToString())
if mode == "eager_loop":
    print(sum(1 for _ in tf.data.TFRecordDataset(path)))
else:
    records = list(split_captions.split_records(root, "dev"))
    mean, _ = inputs.feature_statistics([path], max_caption_length=4, batch_size=2)
    print(len(records), float(mean.mean()))
"""


def _run(tmp_path, mode):
    environment = dict(os.environ, PYTHONPATH=REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="0")
    return subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / mode), mode], cwd=REPO_ROOT,
                          env=environment, capture_output=True, text=True, timeout=300, check=True)


def test_reading_records_to_the_end_logs_no_end_of_sequence_warning(tmp_path):
    control = _run(tmp_path, "eager_loop")
    assert control.stdout.split() == ["5"]
    assert "End of sequence" in control.stderr  # what an eager loop logs

    ours = _run(tmp_path, "ours")
    assert ours.stdout.split() == ["5", "2.0"]  # every record read; mean of 0..4
    assert "End of sequence" not in ours.stderr, ours.stderr[-2000:]
