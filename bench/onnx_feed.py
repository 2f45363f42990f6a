"""A batch of texts as an onnxruntime session's feed: what bench/peer.py and bench/python-server.py
both send their BERT-style models. The tokenizer pads the batch to its longest text."""
import numpy as np
from tokenizers import Tokenizer


def feed_of(tokenizer: Tokenizer, texts: list[str], input_names: set[str]) -> dict[str, np.ndarray]:
    encodings = tokenizer.encode_batch(texts)
    feed = {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
    }
    # Models that take no token types (DistilBERT) have no such input.
    if "token_type_ids" in input_names:
        feed["token_type_ids"] = np.array([e.type_ids for e in encodings], dtype=np.int64)
    return feed
