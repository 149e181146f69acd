"""The Transform stage: the validation gate before it (validation_gate.py), GloVe parsing
(glove.py) and ``preprocessing_fn`` with its vocabulary and GloVe-matrix analyzers
(preprocessing.py)."""
