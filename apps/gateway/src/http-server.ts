import http from 'node:http';
import type { Express } from 'express';

/**
 * An HTTP server for an Express app whose requests and responses are born with the app's
 * prototypes. Express gives each request and response its prototype as it enters the app
 * (`Object.setPrototypeOf`), and V8 then keeps those objects' young neighbours alive through every
 * young-generation collection: each collection paused the event loop several times longer, and the
 * app answered a fraction of the requests a second of the same app given the classes below (what
 * Express's own issue #5998 proposes; measured in bench/README.md, "Shedding and the gateway's
 * memory"). Every refusal waits behind those pauses, which were most of the tail of shedding under
 * overload.
 *
 * The classes carry Express's request and response methods, and become the app's `request` and
 * `response`, so that Express finds each object already of its prototype and leaves it alone. A
 * mounted sub-app (the dashboard) still swaps prototypes for its own requests, as before.
 * `written` hears of each answer once it is written whole.
 */
export function expressServer(app: Express, options: http.ServerOptions, written: (res: http.ServerResponse) => void): http.Server {
  class Request extends http.IncomingMessage {}
  class Response extends http.ServerResponse {
    // Every answer, from any route or protocol, once it is written whole.
    override end(...args: unknown[]): this {
      super.end(...(args as [chunk: unknown, encoding: BufferEncoding, callback?: () => void]));
      written(this);
      return this;
    }
  }
  inherit(Request.prototype, app.request);
  inherit(Response.prototype, app.response);
  app.request = Request.prototype as Express['request'];
  app.response = Response.prototype as unknown as Express['response'];
  return http.createServer({ ...options, IncomingMessage: Request, ServerResponse: Response }, app);
}

/** Copies onto `target` what `source` adds over Node's own prototype: Express's methods and getters, and the app's own (`app`). */
function inherit(target: object, source: object): void {
  const chain: object[] = [];
  for (
    let proto: object | null = source;
    proto && proto !== http.IncomingMessage.prototype && proto !== http.ServerResponse.prototype;
    proto = Object.getPrototypeOf(proto) as object | null
  ) {
    chain.unshift(proto);
  }
  for (const proto of chain) Object.defineProperties(target, Object.getOwnPropertyDescriptors(proto));
}
