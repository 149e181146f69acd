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
# What the TFX image lacks, at the versions of constraints.txt; then this package, without
# letting pip re-resolve the TFX stack the image already holds.
RUN grep -E '^(pycocoevalcap|pycocotools|tensorflow-datasets)==' constraints.txt > /tmp/extra.txt \
    && pip install --no-cache-dir -r /tmp/extra.txt \
    && pip install --no-cache-dir --no-deps -e . \
    && python -c "import components.evaluation.evaluator, pipeline.pipeline"

ENV PYTHONPATH=/pipeline
