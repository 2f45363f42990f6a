"""Writes a copy of a decoder's ONNX file that declares past key values, as the hub's
text-generation exports do (past_key_values.<layer>.key/value inputs, present.<layer>.key/value
outputs), passed through unused: a server must feed them, empty, to run it at all.

    with-past-inputs.py <model.onnx> <out.onnx> <layers> <key-value heads> <head size>

Needs the onnx package (Debian: python3-onnx).
"""
import sys

import onnx
from onnx import TensorProto, helper

source, target, layers, heads, size = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
model = onnx.load(source)
graph = model.graph
for layer in range(layers):
    for part in ("key", "value"):
        name = f"past_key_values.{layer}.{part}"
        shape = ["batch_size", heads, "past_sequence_length", size]
        graph.input.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
        present = f"present.{layer}.{part}"
        graph.node.append(helper.make_node("Identity", [name], [present], name=f"pass/{present}"))
        graph.output.append(helper.make_tensor_value_info(present, TensorProto.FLOAT, shape))
onnx.save(model, target)
