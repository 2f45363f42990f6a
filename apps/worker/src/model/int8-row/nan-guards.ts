import { constantTensor, consumers, floatTensor, graphOutputs, type OnnxModel, type OnnxNode } from './onnx.js';

/**
 * Attention as transformers exports it (scaled dot-product attention) guards each Softmax with
 * Where(IsNaN(p), 0, p): a row whose keys are all masked would be NaN, and becomes zeros. Every
 * row a worker runs attends to at least its own special tokens ([CLS], [SEP], <s>), so the guard
 * hands its input back unchanged; but ONNX Runtime runs that Where on one thread over the whole
 * [batch, heads, tokens, tokens] tensor, a quarter of a 128-token call on two threads. The int8-row
 * file, which the worker writes anyway, goes without it: each guard becomes an Identity, which
 * ONNX Runtime removes when it loads the graph.
 */
export function dropSoftmaxNanGuards(model: OnnxModel): number {
  const producers = new Map<string, OnnxNode>(model.nodes.flatMap((n) => n.outputs.map((o) => [o, n] as const)));
  const users = consumers(model.nodes);
  const inits = new Map(model.initializers.map((i) => [i.name, i]));
  const isZero = (name: string) => {
    const init = inits.get(name);
    const constant = producers.get(name);
    const tensor = init ? floatTensor(init) : constant?.opType === 'Constant' ? constantTensor(constant) : undefined;
    return tensor?.data.length === 1 && tensor.data[0] === 0;
  };
  const outputs = graphOutputs(model);
  const dropped = new Set<OnnxNode>();
  const identities = new Map<OnnxNode, OnnxNode>();
  for (const where of model.nodes) {
    const [condition, zero, probabilities] = where.inputs;
    const isNaN = producers.get(condition);
    const guard =
      where.opType === 'Where' &&
      isNaN?.opType === 'IsNaN' &&
      isNaN.inputs[0] === probabilities &&
      producers.get(probabilities)?.opType === 'Softmax' &&
      users.get(condition)?.length === 1 &&
      !outputs.has(condition) &&
      isZero(zero);
    if (!guard) continue;
    dropped.add(isNaN);
    identities.set(where, {
      opType: 'Identity',
      domain: '',
      name: `${where.name}/without_nan_guard`,
      inputs: [probabilities],
      outputs: where.outputs,
    });
  }
  model.nodes = model.nodes.filter((n) => !dropped.has(n)).map((n) => identities.get(n) ?? n);
  return identities.size;
}
