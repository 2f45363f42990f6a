import http from 'node:http';
import type { Express } from 'express';

/**
 * Slow-drip clients may not pin connections: a request must arrive whole within these bounds. Node
 * checks them every connectionsCheckingInterval, so that is kept well below them, and whole
 * milliseconds (Node refuses a fraction, and the derived timeouts need not divide by four).
 */
export function slowClientTimeouts(headersTimeoutMs: number, requestTimeoutMs: number): http.ServerOptions {
  return {
    headersTimeout: Math.min(headersTimeoutMs, requestTimeoutMs),
    requestTimeout: requestTimeoutMs,
    connectionsCheckingInterval: Math.round(Math.max(100, Math.min(1000, headersTimeoutMs / 4))),
  };
}

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
export function expressServer(
  app: Express,
  options: http.ServerOptions,
  written: (res: http.ServerResponse) => void,
): http.Server {
  class Request extends http.IncomingMessage implements CountsBodyBytes {
    bodyBytes?: (bytes: number) => Error | undefined;
    bodyRefused?: Error;
    /** Under `Expect: 100-continue`: the response whose `100 Continue` waits for a route to read the body. */
    continueOnRead?: http.ServerResponse;
    // The body is asked for only once the request was admitted: a refused one never gets 100 Continue.
    override _read(size: number): void {
      const res = this.continueOnRead;
      this.continueOnRead = undefined;
      if (res && !res.headersSent && !res.writableEnded) res.writeContinue();
      super._read(size);
    }
    // Node's parser pushes each body chunk as it arrives, whoever reads it and whenever.
    override push(chunk: unknown, encoding?: BufferEncoding): boolean {
      if (this.bodyBytes && (typeof chunk === 'string' || Buffer.isBuffer(chunk))) {
        // A refused body is received to its end and dropped: it holds no memory, and the connection
        // stays in step for the refusal, which its route answers once the body is read (bodyRefusal).
        if (this.bodyRefused) return true;
        this.bodyRefused = this.bodyBytes(Buffer.byteLength(chunk));
        if (this.bodyRefused) return true;
      }
      return super.push(chunk, encoding);
    }
  }
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
  const server = http.createServer({ ...options, IncomingMessage: Request, ServerResponse: Response }, app);
  // Node would send 100 Continue before the app saw the request; the app decides instead (above).
  server.on('checkContinue', (req: Request, res: Response) => {
    req.continueOnRead = res;
    server.emit('request', req, res);
  });
  return server;
}

/**
 * A request told of its body's bytes as they are received, not as declared: body admission counts
 * what a client sent, so that connections that declare a body and never send it hold nothing.
 * `bodyBytes` answers an error to refuse the chunk; the rest of the body is then dropped as it
 * arrives, and `bodyRefused` holds the error, for the route to answer.
 */
export interface CountsBodyBytes {
  bodyBytes?: (bytes: number) => Error | undefined;
  bodyRefused?: Error;
}

/** The refusal of a request's body while it arrived, if there was one: it is the answer, whatever the parser made of the rest. */
export function bodyRefusal(req: unknown): Error | undefined {
  return (req as CountsBodyBytes).bodyRefused;
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
