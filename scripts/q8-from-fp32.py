"""Writes a q8 model (transformers.js's onnx/model_quantized.onnx) from an fp32 export, the way the
replicas in ../shared/models were made: ONNX Runtime's dynamic quantization with int8 weights.

    python3 scripts/q8-from-fp32.py <model>/onnx/model.onnx <model>/onnx/model_quantized.onnx

bench/host.sh uses it on a host where the replicas' weights did not travel: the fp32 export that
../shared/gpu/gen_model.py writes has the replica's shapes, so its q8 file costs what the replica's
does (the same 38 MatMulInteger nodes for MiniLM-L6). Needs the onnx and onnxruntime packages.
"""
import collections
import os
import sys
import tempfile

import onnx
from onnxruntime.quantization import QuantType, quantize_dynamic

source, target = sys.argv[1], sys.argv[2]
model = onnx.load(source)
# The exporter's shape annotations disagree with the quantizer's own shape inference, which then
# refuses the model; the quantizer infers them again without them.
del model.graph.value_info[:]
with tempfile.TemporaryDirectory() as tmp:
    plain = os.path.join(tmp, "plain.onnx")
    onnx.save(model, plain)
    quantize_dynamic(plain, target, weight_type=QuantType.QInt8)
ops = collections.Counter(node.op_type for node in onnx.load(target).graph.node)
print(f"q8: {target}: {ops['MatMulInteger']} MatMulInteger, {ops['MatMul']} MatMul left in float")
