"""Writes a model.onnx whose answers do not depend on batch mates, from a dynamically quantized
(q8) export such as transformers.js's onnx/model_quantized.onnx.

    python3 scripts/fp32-from-q8.py <model>/onnx/model_quantized.onnx <model>/onnx/model.onnx

A q8 export quantizes each MatMul's activations per call, scaled by the whole batch's range, so an
input's answer shifts with what it was batched with. Here each such MatMul becomes a float MatMul
on its dequantized weights: the weights keep their int8 precision (the answers stay near the q8
ones), but no activation is quantized, so every row is computed independently of the others.
Needs the onnx and numpy packages (Debian: python3-onnx python3-numpy).
"""
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper


def dequantize(model: onnx.ModelProto) -> int:
    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    dropped: set[int] = set()
    replaced: dict[int, onnx.NodeProto] = {}
    for node in graph.node:
        if node.op_type != 'MatMulInteger' or node.input[1] not in initializers:
            continue
        # The pattern onnxruntime's dynamic quantization writes:
        # x -> DynamicQuantizeLinear -> MatMulInteger(., W_q) -> Cast -> Mul(., x_scale * W_scale)
        quantize = producer[node.input[0]]
        if quantize.op_type != 'DynamicQuantizeLinear':
            raise SystemExit(f'{node.name}: input from {quantize.op_type}, not DynamicQuantizeLinear')
        x, x_scale = quantize.input[0], quantize.output[1]
        weights = numpy_helper.to_array(initializers[node.input[1]]).astype(np.float32)
        zero_point = numpy_helper.to_array(initializers[node.input[3]]).astype(np.float32) if len(node.input) > 3 and node.input[3] else 0.0
        (cast,) = consumers[node.output[0]]
        (rescale,) = consumers[cast.output[0]]
        if cast.op_type != 'Cast' or rescale.op_type != 'Mul':
            raise SystemExit(f'{node.name}: followed by {cast.op_type} and {rescale.op_type}, not Cast and Mul')
        # This MatMul's own x_scale * W_scale: the one its rescale multiplies by. A quantizer shared
        # by several MatMuls (query, key, value) feeds one such Mul for each, with different W_scales.
        scales = producer[next(i for i in rescale.input if i != cast.output[0])]
        if scales.op_type != 'Mul' or x_scale not in scales.input:
            raise SystemExit(f'{node.name}: rescaled by {scales.op_type}, not by x_scale * W_scale')
        w_scale = numpy_helper.to_array(initializers[next(i for i in scales.input if i != x_scale)]).astype(np.float32)
        name = f'{node.input[1]}_fp32'
        if name not in initializers:
            initializers[name] = numpy_helper.from_array(((weights - zero_point) * w_scale).astype(np.float32), name)
            graph.initializer.append(initializers[name])
        dropped.update((id(node), id(cast), id(scales)))
        replaced[id(rescale)] = helper.make_node('MatMul', [x, name], [rescale.output[0]], name=f'{node.name}_fp32')

    nodes = [replaced.get(id(n), n) for n in graph.node if id(n) not in dropped]
    used = {i for n in nodes for i in n.input}
    nodes = [n for n in nodes if n.op_type != 'DynamicQuantizeLinear' or any(o in used for o in n.output)]
    del graph.node[:]
    graph.node.extend(nodes)
    used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    kept = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return len(replaced)


if __name__ == '__main__':
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    model = onnx.load(sys.argv[1])
    count = dequantize(model)
    if count == 0:
        raise SystemExit(f'{sys.argv[1]}: no dynamically quantized MatMul found')
    onnx.checker.check_model(model)
    onnx.save(model, sys.argv[2])
    print(f'{sys.argv[2]}: {count} MatMuls in float')
