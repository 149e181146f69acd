"""Package definition for the Flickr8k image-captioning TFX pipeline.

Install through the Makefile (``make install``), which applies ``constraints.txt``
so every machine gets the same, known-good TFX 1.16 stack.
"""
import setuptools

setuptools.setup(
    name="flickr8k-captioning-tfx",
    version="0.1.0",
    description=(
        "A production TFX pipeline for image captioning on Flickr8k: Beam "
        "ingestion of ResNet50 features, tf.Transform vocabulary and GloVe "
        "matrix, an LSTM + attention decoder trained under MirroredStrategy, "
        "caption metrics and a self-contained SavedModel."
    ),
    python_requires=">=3.10,<3.11",
    packages=setuptools.find_packages(include=["components", "components.*", "pipeline", "pipeline.*"]),
    package_data={"": ["*.pbtxt"]},
    install_requires=[
        "tfx==1.16.0",
        "tensorflow==2.16.2",
        "tensorflow-transform==1.16.0",
        "apache-beam[gcp]==2.59.0",
        "kfp==2.0.1",
        "kfp-pipeline-spec==0.2.2",
        "google-cloud-aiplatform",
        "tensorflow-datasets",
        "pycocoevalcap",
        "ijson",  # streams Karpathy and COCO JSON files instead of loading them whole
        "pillow",
        "numpy",
        "protobuf==3.20.3",
        "absl-py",
        "tqdm",  # the console's progress bars
    ],
    extras_require={
        "dev": ["pytest", "pytest-timeout", "ruff"],
    },
)
