import { keyPresented } from '../admission/admission.js';
import { booleanNamed, deadlineIn, type Envelope, type ProtocolParts } from './envelope.js';

/**
 * What a gRPC call brings besides its message: the metadata that HTTP's headers carry, its deadline
 * and its cancellation, admitted and made into an envelope as an HTTP request's headers are
 * (envelope.ts).
 */

/** A request that says what HTTP's headers say in metadata instead (gRPC's): the names are the headers'. */
export interface MetadataEnvelope {
  metadata: (name: string) => string | undefined;
  /** Aborts when the client goes away. */
  signal: AbortSignal;
  /** The deadline the envelope sets (ms). */
  timeoutMs?: number;
}

/**
 * Admits a request that carries metadata, as `Admission.admit` admits an HTTP request (key,
 * model permission, priority, shedding, quota), and gives its envelope, and the release of its
 * quota's slot to call once it is answered.
 */
export async function admitMetadata(
  { admission, config }: Pick<ProtocolParts, 'admission' | 'config'>,
  call: MetadataEnvelope,
  model: string | undefined,
  requestId: string,
): Promise<{ envelope: Envelope; release: () => void }> {
  const admitted = admission.caller({
    key: keyPresented(call.metadata('authorization'), call.metadata('x-api-key')),
    model,
    priority: call.metadata('x-priority'),
  });
  // Read before the quota's slot is taken: a refusal here holds none.
  const envelope: Envelope = {
    id: requestId,
    signal: call.signal,
    priority: admitted.priority,
    deadline: deadlineIn(call.timeoutMs, config.REQUEST_TIMEOUT_MS),
    waitForModel: booleanNamed('x-wait-for-model', call.metadata('x-wait-for-model')),
    useCache: booleanNamed('x-use-cache', call.metadata('x-use-cache')),
    startedAt: performance.now(),
  };
  const release = await admission.quota(admitted, requestId, () => undefined);
  return { envelope, release: release ?? (() => undefined) };
}
