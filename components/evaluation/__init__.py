"""The evaluation stage: decoding every image of a split (split_captions.py), caption metrics
with pycocoevalcap (caption_metrics.py), the HTML report and the CaptionEvaluator component that
blesses a model (evaluator.py)."""
