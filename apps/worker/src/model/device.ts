import { DTYPES, DEVICES } from '@tserve/config';

/**
 * Which device and which weights a worker runs: decided once at start-up, from the settings and the
 * model files present, before anything is loaded.
 */

export type Device = Exclude<(typeof DEVICES)[number], 'gpu'>;
export type Dtype = Exclude<(typeof DTYPES)[number], 'auto'>;
/** The dtypes transformers.js loads a file of its own for; int8-row is written from one of them (int8-row/). */
export type FileDtype = Exclude<Dtype, 'int8-row'>;

/** transformers.js's file for each dtype, in a model's onnx/ folder. */
const DTYPE_FILES: Record<FileDtype, string> = {
  fp32: 'model.onnx',
  fp16: 'model_fp16.onnx',
  q8: 'model_quantized.onnx',
  int8: 'model_int8.onnx',
  uint8: 'model_uint8.onnx',
  q4: 'model_q4.onnx',
  q4f16: 'model_q4f16.onnx',
  bnb4: 'model_bnb4.onnx',
};

/** The weights file transformers.js loads for a dtype, relative to the model's folder. */
export function dtypeFile(dtype: FileDtype): string {
  return `onnx/${DTYPE_FILES[dtype]}`;
}

/** The file int8-row is written from: the fp32 weights where the model has them (quantized per column, better than q8's per-tensor weights), else the q8 export. */
export function int8RowSource(available: string[] | undefined): 'fp32' | 'q8' {
  return available === undefined || available.includes(DTYPE_FILES.fp32) || !available.includes(DTYPE_FILES.q8)
    ? 'fp32'
    : 'q8';
}

/** Integer-quantised weights: their kernels exist on the CPU only, so on a GPU each call copies back and forth. */
const CPU_ONLY: Dtype[] = ['int8-row', 'q8', 'int8', 'uint8', 'bnb4'];

export class DeviceChoiceError extends Error {}

/** `gpu` means the GPU backend onnxruntime-node ships (WebGPU over Vulkan); CUDA needs its own build. */
export function resolveDevice(device: (typeof DEVICES)[number]): Device {
  return device === 'gpu' ? 'webgpu' : device;
}

export const isGpu = (device: Device) => device !== 'cpu';

export interface DtypeChoice {
  dtype: Dtype;
  /** Said once at start-up when the choice is legal but probably not what the operator wants. */
  warning?: string;
  /** Why DTYPE=auto chose it, said once at start-up. */
  reason?: string;
}

/**
 * What DTYPE=auto on a CPU chooses and what it costs (docs/models.md, "int8 per row"): on
 * this project's VMs int8-row ran 1.12-1.29x q8's CPU per model call at 16 tokens (a batch of 32, of
 * one) and 0.99-1.05x at 128 (ONNX Runtime 1.30, one thread), for answers that never depend on
 * their batch mates.
 */
const AUTO_ON_CPU =
  "DTYPE=auto chose int8-row: answers that do not depend on their batch mates, as fp32's, at int8 speed; short inputs cost up to 1.3x what q8 costs (DTYPE=q8 is faster where a batch may shift an answer slightly: docs/models.md)";

/**
 * The dtype to load. `available` lists the model's onnx/ files when it is local (undefined for the
 * hub, whose files are not known before the download).
 */
export function chooseDtype(
  requested: (typeof DTYPES)[number],
  device: Device,
  available: string[] | undefined,
  force: boolean,
): DtypeChoice {
  const has = (dtype: FileDtype) => available?.includes(DTYPE_FILES[dtype]) ?? false;
  if (requested === 'auto') {
    // On a CPU never q8, whose answers depend on the batch (batchDependence): int8-row is as
    // batch-independent as fp32 and was faster than fp32 on every model measured (docs/models.md).
    if (!isGpu(device)) return { dtype: 'int8-row', reason: AUTO_ON_CPU };
    if (has('fp16')) return { dtype: 'fp16' };
    if (available === undefined) {
      return {
        dtype: 'fp32',
        warning: `DTYPE=auto on ${device} loads fp32 from the hub; set DTYPE=fp16 if the model has onnx/${DTYPE_FILES.fp16} (about twice as fast)`,
      };
    }
    return { dtype: 'fp32' };
  }
  if (isGpu(device) && CPU_ONLY.includes(requested)) {
    const slow = `DTYPE=${requested} on ${device}: its integer kernels run on the CPU, with copies between CPU and GPU at every call (20-60x slower than on the CPU)`;
    if (!force)
      throw new DeviceChoiceError(
        `${slow}. Use DTYPE=fp16 or fp32 (or DTYPE=auto), DEVICE=cpu, or set DTYPE_FORCE=true to run it anyway`,
      );
    return { dtype: requested, warning: `${slow}; running it because DTYPE_FORCE=true` };
  }
  return { dtype: requested };
}

/** Refuses a dtype whose file a local model lacks, naming the files it has. */
export function checkDtypeFile(model: string, dtype: Dtype, available: string[] | undefined): void {
  if (available === undefined) return;
  if (
    dtype === 'int8-row'
      ? [DTYPE_FILES.fp32, DTYPE_FILES.q8].some((f) => available.includes(f))
      : available.includes(DTYPE_FILES[dtype])
  )
    return;
  const wanted =
    dtype === 'int8-row' ? `onnx/${DTYPE_FILES.fp32} or onnx/${DTYPE_FILES.q8}` : `onnx/${DTYPE_FILES[dtype]}`;
  const present = Object.entries(DTYPE_FILES)
    .filter(([, file]) => available.includes(file))
    .map(([d, file]) => `${file} (DTYPE=${d})`);
  throw new DeviceChoiceError(
    `no ${wanted} in ${model} for DTYPE=${dtype}; it has ${present.length ? present.join(', ') : 'no model file transformers.js can load'}`,
  );
}

/** What to do when no GPU adapter can be had: the message says what to install. */
export function noAdapterMessage(device: Device, detail: string): string {
  return (
    `no GPU adapter for DEVICE=${device} (${detail}). WebGPU runs on Vulkan: install the Vulkan loader ` +
    '(Debian/Ubuntu: apt-get install libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2), make the ' +
    "NVIDIA driver's Vulkan ICD visible (e.g. VK_DRIVER_FILES=/usr/share/vulkan/icd.d/nvidia_icd.json), and in " +
    'containers set NVIDIA_DRIVER_CAPABILITIES to include graphics (e.g. compute,utility,graphics). Or run DEVICE=cpu.'
  );
}

/** True for the errors ONNX Runtime and Dawn give when no GPU can be used. */
export function isNoAdapterError(message: string): boolean {
  return /Failed to get a WebGPU adapter|No supported adapters|libvulkan|requestAdapter/i.test(message);
}
