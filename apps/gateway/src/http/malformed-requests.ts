import type { Server } from 'node:http';
import type { Duplex } from 'node:stream';
import type { ErrorBody } from '@tserve/contract';

/** What Node's parser refused, as the client is told: status, reason phrase, and the error body's words. */
function answerFor(code: string | undefined): { status: number; reason: string; body: ErrorBody } {
  if (code === 'HPE_HEADER_OVERFLOW') {
    return {
      status: 431,
      reason: 'Request Header Fields Too Large',
      body: { error: 'request headers are larger than the gateway takes (16 KB)', error_type: 'validation' },
    };
  }
  if (code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    return {
      status: 408,
      reason: 'Request Timeout',
      body: {
        error:
          'the request did not arrive in time (HTTP_HEADERS_TIMEOUT_MS for its headers, HTTP_REQUEST_TIMEOUT_MS for all of it)',
        error_type: 'timeout',
      },
    };
  }
  return {
    status: 400,
    reason: 'Bad Request',
    body: { error: `malformed HTTP request (${code ?? 'unparsable'})`, error_type: 'validation' },
  };
}

/**
 * A request Node's parser refuses (a malformed request line or header, headers too large, a request
 * that did not arrive in time) never reaches a route: Node would answer it with a bare status line.
 * It gets the native error body instead, so that a client sees why, and its connection is closed.
 * A connection whose answer has begun is closed without one (bytes written now would corrupt it).
 */
export function answerMalformedRequests(server: Server): void {
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    const answering = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent;
    if (err.code === 'ECONNRESET' || !socket.writable || answering) {
      socket.destroy();
      return;
    }
    const { status, reason, body } = answerFor(err.code);
    const text = JSON.stringify(body);
    socket.end(
      `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`,
    );
  });
}
