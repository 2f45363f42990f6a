"""A sentence embedding as sentence-transformers makes it, computed outside tserve, for inputs and
folders the shared references do not hold (a text longer than the model takes, other pooling
modes, a prompt left out of the pooling, lower-casing): the model folder's tokenizer.json (the
tokenizers library) cut at sentence_bert_config.json's max_seq_length with the special tokens kept,
as transformers' tokenizers cut; ONNX Runtime on onnx/model_quantized.onnx, the text alone; then
sentence-transformers' Pooling as its source defines it (pooling_mode, or the legacy
pooling_mode_* keys; include_prompt), and L2 normalisation where modules.json has Normalize.

Usage: family-reference.py <model folder> <JSON list of texts> [<prompt>]; prints a JSON list of
{"ids": [...], "embedding": [...]}.
"""
import json
import sys

import numpy as np
import onnxruntime
from tokenizers import Tokenizer

folder, texts = sys.argv[1], json.loads(sys.argv[2])
prompt = sys.argv[3] if len(sys.argv) > 3 else ""
with open(f"{folder}/sentence_bert_config.json") as f:
    bert = json.load(f)
with open(f"{folder}/1_Pooling/config.json") as f:
    pooling = json.load(f)
with open(f"{folder}/modules.json") as f:
    normalize = any(m["type"].endswith(".Normalize") for m in json.load(f))
LEGACY = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
modes = pooling.get("pooling_mode") or [mode for key, mode in LEGACY.items() if pooling.get(key)] or ["mean"]
modes = [modes] if isinstance(modes, str) else modes

tokenizer = Tokenizer.from_file(f"{folder}/tokenizer.json")
tokenizer.no_padding()
tokenizer.enable_truncation(max_length=bert["max_seq_length"])
special = {i for i, token in tokenizer.get_added_tokens_decoder().items() if token.special}
session = onnxruntime.InferenceSession(f"{folder}/onnx/model_quantized.onnx", providers=["CPUExecutionProvider"])
names = {i.name for i in session.get_inputs()}


def tokenize(text):
    # sentence-transformers' do_lower_case lower-cases where the tokenizer does not already.
    return tokenizer.encode(text.lower() if bert.get("do_lower_case") else text).ids


# The prompt's length as sentence-transformers counts it: tokenized alone, less a special token ending it.
prompt_length = 0
if prompt and pooling.get("include_prompt") is False:
    ids = tokenize(prompt)
    prompt_length = len(ids) - (1 if ids and ids[-1] in special else 0)

answers = []
for text in texts:
    ids = tokenize(prompt + text)
    n = len(ids)
    feeds = {
        "input_ids": np.array([ids], dtype=np.int64),
        "attention_mask": np.ones((1, n), dtype=np.int64),
        "token_type_ids": np.zeros((1, n), dtype=np.int64),
        "position_ids": np.arange(n, dtype=np.int64)[None, :],
    }
    (hidden,) = session.run(["last_hidden_state"], {k: v for k, v in feeds.items() if k in names})
    tokens = hidden[0].astype(np.float64)
    mask = np.ones(n)
    mask[:prompt_length] = 0
    kept = tokens[mask == 1]
    weights = (np.arange(n) + 1.0) * mask
    vectors = {
        "cls": kept[0],
        "lasttoken": tokens[np.nonzero(mask)[0][-1]],
        "max": kept.max(axis=0),
        "mean": kept.sum(axis=0) / mask.sum(),
        "mean_sqrt_len_tokens": kept.sum(axis=0) / np.sqrt(mask.sum()),
        "weightedmean": (tokens * weights[:, None]).sum(axis=0) / weights.sum(),
    }
    vector = np.concatenate([vectors[mode] for mode in modes])
    if normalize:
        vector = vector / np.linalg.norm(vector)
    answers.append({"ids": ids, "embedding": vector.tolist()})
print(json.dumps(answers))
