"""A sentence embedding as sentence-transformers makes it, computed outside tserve, for inputs the
shared references do not hold (a text longer than the model takes): the model folder's
tokenizer.json (the tokenizers library) cut at sentence_bert_config.json's max_seq_length with the
special tokens kept, as transformers' tokenizers cut; ONNX Runtime on onnx/model_quantized.onnx, the
text alone; the pooling that 1_Pooling/config.json names (cls, mean or lasttoken), then L2
normalisation (the folders used here all end in Normalize).

Usage: family-reference.py <model folder> <JSON list of texts>; prints a JSON list of
{"ids": [...], "embedding": [...]}.
"""
import json
import sys

import numpy as np
import onnxruntime
from tokenizers import Tokenizer

folder, texts = sys.argv[1], json.loads(sys.argv[2])
with open(f"{folder}/sentence_bert_config.json") as f:
    max_length = json.load(f)["max_seq_length"]
with open(f"{folder}/1_Pooling/config.json") as f:
    pooling = json.load(f)
tokenizer = Tokenizer.from_file(f"{folder}/tokenizer.json")
tokenizer.no_padding()
tokenizer.enable_truncation(max_length=max_length)
session = onnxruntime.InferenceSession(f"{folder}/onnx/model_quantized.onnx", providers=["CPUExecutionProvider"])
names = {i.name for i in session.get_inputs()}
answers = []
for text in texts:
    encoding = tokenizer.encode(text)
    n = len(encoding.ids)
    feeds = {
        "input_ids": np.array([encoding.ids], dtype=np.int64),
        "attention_mask": np.ones((1, n), dtype=np.int64),
        "token_type_ids": np.zeros((1, n), dtype=np.int64),
        "position_ids": np.arange(n, dtype=np.int64)[None, :],
    }
    (hidden,) = session.run(["last_hidden_state"], {k: v for k, v in feeds.items() if k in names})
    tokens = hidden[0].astype(np.float64)
    if pooling.get("pooling_mode_cls_token"):
        vector = tokens[0]
    elif pooling.get("pooling_mode_lasttoken"):
        vector = tokens[-1]
    else:
        vector = tokens.mean(axis=0)
    answers.append({"ids": encoding.ids, "embedding": (vector / np.linalg.norm(vector)).tolist()})
print(json.dumps(answers))
