"""SPLADE vectors of texts, computed outside tserve: the model folder's tokenizer.json (the
tokenizers library) and onnx/model.onnx (ONNX Runtime), each text alone, pooled as
sentence-transformers' SpladePooling does (max over tokens of log(1 + ReLU(logits))).

Usage: splade-reference.py <model folder> <JSON list of texts>; prints a JSON list of
[{"index", "value"}] lists, non-zero entries by index.
"""
import json
import sys

import numpy as np
import onnxruntime
from tokenizers import Tokenizer

folder, texts = sys.argv[1], json.loads(sys.argv[2])
tokenizer = Tokenizer.from_file(f"{folder}/tokenizer.json")
# Some tokenizer.json files pad every text to a fixed length: each text runs alone here, unpadded.
tokenizer.no_padding()
session = onnxruntime.InferenceSession(f"{folder}/onnx/model.onnx", providers=["CPUExecutionProvider"])
names = {i.name for i in session.get_inputs()}
vectors = []
for text in texts:
    encoding = tokenizer.encode(text)
    feeds = {
        "input_ids": np.array([encoding.ids], dtype=np.int64),
        "attention_mask": np.array([encoding.attention_mask], dtype=np.int64),
        "token_type_ids": np.array([encoding.type_ids], dtype=np.int64),
    }
    (logits,) = session.run(["logits"], {k: v for k, v in feeds.items() if k in names})
    pooled = np.log1p(np.maximum(logits[0].astype(np.float64), 0)).max(axis=0)
    vectors.append([{"index": int(j), "value": float(pooled[j])} for j in np.flatnonzero(pooled > 0)])
print(json.dumps(vectors))
