import { keyPresented } from '../admission/admission.js';
import { booleanNamed, callerOf, type Caller, type ProtocolParts } from './route-call.js';

/**
 * What a gRPC call brings besides its message: the metadata that HTTP's headers carry, its deadline
 * and its cancellation, admitted and made into a caller as an HTTP request's headers are (route-call.ts).
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
 * Admits a request that carries metadata, as `Admission.beforeBody` admits an HTTP request (key,
 * model permission, priority, shedding, quota), and gives its caller, and the release of its
 * quota's slot to call once it is answered.
 */
export async function admitMetadata(
  { admission, service }: Pick<ProtocolParts, 'admission' | 'service'>,
  envelope: MetadataEnvelope,
  model: () => string | undefined,
  requestId: string,
): Promise<{ caller: Caller; release: () => void }> {
  const admitted = admission.caller({
    key: keyPresented(envelope.metadata('authorization'), envelope.metadata('x-api-key')),
    model,
    priority: envelope.metadata('x-priority'),
  });
  // Read before the quota's slot is taken: a refusal here holds none.
  const caller = callerOf(service, {
    requestId,
    signal: envelope.signal,
    priority: admitted.priority,
    timeoutMs: envelope.timeoutMs,
    waitForModel: booleanNamed('x-wait-for-model', envelope.metadata('x-wait-for-model')),
    useCache: booleanNamed('x-use-cache', envelope.metadata('x-use-cache')),
  });
  const release = await admission.quota(admitted, requestId, () => undefined);
  return { caller, release: release ?? (() => undefined) };
}
