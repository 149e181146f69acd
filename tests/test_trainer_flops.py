"""The trainer bench's counted work per caption, held to a count by hand on a tiny decoder."""

from benchmarks import trainer_bench
from components import config as config_lib


def test_training_flops_count_every_layer_once_per_token_and_the_encoder_once_per_image():
    trainer = config_lib.TrainerConfig(image_dense_units=(4,), lstm_units=3, second_lstm_units=2,
                                       attention_heads=1, attention_key_dim=2)
    counted = trainer_bench.training_flops_per_caption(trainer, vocabulary_size=5, input_tokens=10,
                                                       captions_per_image=2, embedding_dim=6)
    encoder = 2 * 49 * 2048 * 4  # Dense(4) on 49 positions of 2048, per image
    key_value = 2 * 2 * 49 * 4 * 2  # both projections of the 49 positions, per caption row
    per_token = (2 * 4 * 3 * (6 + 3)  # caption_lstm: 4 gates over [input, state]
                 + 2 * 3 * 2 + 2 * 2 * 49 * 2 + 2 * 2 * 3  # query, scores + sum, output
                 + 2 * 4 * 2 * (3 + 2)  # decoder_lstm
                 + 2 * 2 * 5)  # logits
    forward = encoder / 2 + key_value + 10 * per_token
    assert counted["forward_flops"] == forward
    assert counted["training_flops"] == 3 * forward
    assert sum(counted["flops_per_token"].values()) == per_token
