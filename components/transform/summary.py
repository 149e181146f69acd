"""What Transform reports about a TransformGraph it wrote: vocabulary, lengths, GloVe coverage."""

import json
import os
from typing import List

from components import example_format


def describe(transform_graph_uri: str) -> List[str]:
    """The vocabulary's size, the maximum caption length and GloVe's coverage of the train tokens."""
    facts_path = os.path.join(transform_graph_uri, "transform_fn", "assets", example_format.FACTS_FILE)
    with open(facts_path, encoding="utf-8") as stream:
        facts = json.load(stream)
    embedding = facts["embedding"]
    return [f"vocabulary: {facts['vocabulary_size']} ids ({facts['words_in_vocabulary']} words); "
            f"max caption length {facts['max_caption_length']} ids, "
            f"{facts['train_captions_truncated']} of {facts['train_captions']} train captions truncated",
            f"GloVe: {embedding['words_found']}/{embedding['vocabulary_size']} words found, "
            f"{100 * embedding['token_weighted_coverage']:.1f}% of train tokens "
            f"({embedding['glove_file'] or 'no GloVe file: random, trainable embedding'})"]
