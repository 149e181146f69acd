# The pipeline image: every component on Kubeflow Pipelines / Vertex AI, the Vertex AI training
# job and the Dataflow workers run it. Build from the repository root:
#   docker build -t gcr.io/PROJECT/flickr8k-captioning:latest . && docker push gcr.io/PROJECT/flickr8k-captioning:latest
# The matching TFX release image brings TFX 1.16, TensorFlow 2.16, Beam 2.59 and Python 3.10.
FROM gcr.io/tfx-oss-public/tfx:1.16.0

# Java for pycocoevalcap's PTB tokenizer and METEOR (the evaluator).
RUN apt-get update \
    && apt-get install -y --no-install-recommends default-jre-headless \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /pipeline
COPY constraints.txt setup.py README.md ./
COPY components components
COPY pipeline pipeline
COPY schemas schemas
# The tested stack: every distribution the pipeline imports (and tf-keras, which tf.Transform
# imports for it; pydantic's own pinned dependencies) at its version in constraints.txt, without letting pip re-resolve the TFX
# stack the image holds. The TFX 1.16 image pins an older Keras 3, which does not divide each
# replica's loss by the replica count (components/trainer/losses.py relies on it: gradients on
# N GPUs would be N times too large); run_fn refuses such a Keras. Then this package.
# tests/test_dockerfile.py checks this list against the imports and constraints.txt.
RUN grep -E '^(absl-py|annotated-types|apache-beam|google-cloud-aiplatform|ijson|keras|kfp|kfp-pipeline-spec|ml-metadata|numpy|pillow|protobuf|pycocoevalcap|pycocotools|pydantic|pydantic_core|tensorflow|tensorflow-data-validation|tensorflow-datasets|tensorflow-transform|tf_keras|tfx|tfx-bsl|tqdm|typing-inspection|typing_extensions)==' \
        constraints.txt > /tmp/pinned.txt \
    && pip install --no-cache-dir --no-deps -r /tmp/pinned.txt \
    && pip install --no-cache-dir --no-deps -e . \
    && python -c "import keras, components.evaluation.evaluator, pipeline.pipeline; print(keras.__version__)"

ENV PYTHONPATH=/pipeline
