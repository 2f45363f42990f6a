import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { ApiKey, KeyStore } from './api-keys.js';

/**
 * A batch's lines are sent to this gateway's own routes as the key that owns the batch, whose
 * secret the gateway never holds. They present a token instead, `tsb_<key id>_<secret>`, whose
 * secret is this process's own, random and never sent anywhere but to itself: nobody else can
 * make one, and one made by a gateway that has stopped is worth nothing.
 */
export class LineCallers {
  private readonly secret = randomBytes(32).toString('base64url');

  constructor(private readonly keys: KeyStore) {}

  /** The token that sends a line as the key `keyId`. */
  tokenFor(keyId: string): string {
    return `tsb_${keyId}_${this.secret}`;
  }

  /** The key a line's token names, if the token is this gateway's and the key still in force. */
  keyOf(token: string | undefined): ApiKey | undefined {
    const match = /^tsb_([a-z0-9]{4,32})_([A-Za-z0-9_-]{43})$/.exec(token ?? '');
    if (!match || !timingSafeEqual(Buffer.from(match[2]), Buffer.from(this.secret))) return undefined;
    return this.keys.byId(match[1]);
  }
}
