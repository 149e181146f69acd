"""TensorFlow's in-memory ``ram://`` filesystem for artifact I/O tests: on Vertex and Kubeflow
every artifact URI is ``gs://``, so code that reaches for the local disk (``open``, ``glob``,
``os.path``) fails there and must fail here too."""

import os
import uuid

import tensorflow as tf


def new_root(name: str) -> str:
    """A fresh ``ram://`` folder (the filesystem is per process and never cleared by itself)."""
    return f"ram://{name}-{uuid.uuid4().hex[:8]}"


def copy_tree(source: str, destination: str) -> str:
    """Copies a local (or any gfile) folder to ``destination``; returns ``destination``."""
    for directory, _, files in tf.io.gfile.walk(source):
        relative = os.path.relpath(directory, source)
        target = destination if relative == "." else os.path.join(destination, relative)
        tf.io.gfile.makedirs(target)
        for name in files:
            tf.io.gfile.copy(os.path.join(directory, name), os.path.join(target, name), overwrite=True)
    return destination


def files_under(root: str) -> list:
    """Every file below ``root``, relative to it, sorted."""
    return sorted(os.path.relpath(os.path.join(directory, name), root)
                  for directory, _, files in tf.io.gfile.walk(root) for name in files)


def read_text(path: str) -> str:
    with tf.io.gfile.GFile(path) as stream:
        return stream.read()
