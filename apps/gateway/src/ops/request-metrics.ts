import type { RequestHandler } from 'express';
import { Counter, Histogram, type Registry } from 'prom-client';
import type { RequestTiming } from '@tserve/contract';
import type { InferenceObserver } from '../serving/inference.js';
import { routeOf } from './route-label.js';

/** Latencies of a server whose model calls take about a millisecond and whose deadline is tens of seconds. */
const SECONDS_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
const BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256];

/**
 * Status label of a request whose client left before it was answered (nginx's convention), so
 * that abandoned requests are counted apart from answered ones.
 */
const CLIENT_CLOSED = '499';

export interface RequestMetrics extends InferenceObserver {
  /** First middleware: counts and times every request when its response closes. */
  track: RequestHandler;
  /** Counts and times a gRPC call as it ends, by method and status. */
  grpcCall: (method: string, status: string, seconds: number) => void;
}

/** What each request tells as it ends: its HTTP answer or gRPC status and, for one a model answered, its timings. */
export function requestMetrics(registers: Registry[]): RequestMetrics {
  return { track: httpSeries(registers), grpcCall: grpcSeries(registers), answered: answeredSeries(registers) };
}

/** Every gRPC call, by method and status, counted and timed as it ends. */
function grpcSeries(registers: Registry[]): RequestMetrics['grpcCall'] {
  const calls = new Counter({
    name: 'tserve_grpc_requests_total',
    help: 'gRPC calls answered, by method (package.Service/Method) and status (OK, INVALID_ARGUMENT, CANCELLED, ...)',
    labelNames: ['method', 'status'] as const,
    registers,
  });
  const duration = new Histogram({
    name: 'tserve_grpc_request_duration_seconds',
    help: 'Time from receiving a gRPC call to its status, by method and status',
    labelNames: ['method', 'status'] as const,
    buckets: SECONDS_BUCKETS,
    registers,
  });
  return (method, status, seconds) => {
    calls.inc({ method, status });
    duration.observe({ method, status }, seconds);
  };
}

/** Every request, by method, route pattern and status, counted and timed when its response closes. */
function httpSeries(registers: Registry[]): RequestHandler {
  const requests = new Counter({
    name: 'tserve_http_requests_total',
    help: 'HTTP requests answered, by method, route pattern and status code (499: the client left first)',
    labelNames: ['method', 'route', 'status'] as const,
    registers,
  });
  const duration = new Histogram({
    name: 'tserve_http_request_duration_seconds',
    help: 'Time from receiving a request to finishing its response, by method, route pattern and status code',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: SECONDS_BUCKETS,
    registers,
  });
  return (req, res, next) => {
    const started = performance.now();
    // 'close' comes once per response, answered or abandoned; 'finish' never comes for the latter.
    res.once('close', () => {
      const labels = {
        method: req.method,
        route: routeOf(req, res),
        status: res.writableFinished ? String(res.statusCode) : CLIENT_CLOSED,
      };
      requests.inc(labels);
      duration.observe(labels, (performance.now() - started) / 1000);
    });
    next();
  };
}

/** Where an answered request's time went, and the model call that ran it, by model. */
function answeredSeries(registers: Registry[]): InferenceObserver['answered'] {
  const queueWait = new Histogram({
    name: 'tserve_queue_wait_seconds',
    help: 'Time a request waited from enqueue to the start of the model call that ran it, by model (answered requests)',
    labelNames: ['model'] as const,
    buckets: SECONDS_BUCKETS,
    registers,
  });
  const inference = new Histogram({
    name: 'tserve_inference_duration_seconds',
    help: 'Model time of a request, tokenization and post-processing included, by model (answered requests)',
    labelNames: ['model'] as const,
    buckets: SECONDS_BUCKETS,
    registers,
  });
  const batchSize = new Histogram({
    name: 'tserve_batch_size',
    help: 'Sequences in the model call that ran a request (the largest if several), by model (answered requests)',
    labelNames: ['model'] as const,
    buckets: BATCH_BUCKETS,
    registers,
  });
  return (model: string, timing: RequestTiming) => {
    queueWait.observe({ model }, timing.queue_ms / 1000);
    inference.observe({ model }, timing.inference_ms / 1000);
    batchSize.observe({ model }, timing.batch_size);
  };
}
