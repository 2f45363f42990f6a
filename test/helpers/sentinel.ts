/**
 * Redis as production runs it with Sentinel, on private ports: a primary, a replica of it, and three
 * sentinels (Debian's redis-server, started with --sentinel) that watch it, agree it is down and
 * promote the replica. The failover tests and benchmarks kill the primary and watch them.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { freePort, PrivateRedis, Proc, waitFor } from './processes.ts';

/** The name the sentinels know the primary by (REDIS_SENTINEL_MASTER). */
export const MASTER = 'tserve';

export interface SentinelOptions {
  /** Sentinel's down-after-milliseconds: silent this long, the primary counts as down. */
  downAfterMs: number;
  /** Sentinel's failover-timeout: a failover that stalls is tried again after this. */
  failoverTimeoutMs?: number;
  /** The primary's and the replica's password (requirepass), where they have one. */
  password?: string;
  /** The sentinels' own (requirepass, and what they give each other). */
  sentinelPassword?: string;
}

export class SentinelGroup {
  readonly sentinels: Proc[] = [];
  /** The primary's and the replica's servers, by port: which is which changes with a failover. */
  readonly servers = new Map<number, PrivateRedis>();
  private readonly dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-sentinel-'));

  private constructor(
    readonly sentinelPorts: number[],
    readonly options: SentinelOptions,
  ) {}

  /** Starts the primary, its replica and three sentinels, and waits until the sentinels could fail it over. */
  static async start(options: SentinelOptions): Promise<SentinelGroup> {
    const group = new SentinelGroup([await freePort(), await freePort(), await freePort()], options);
    try {
      await group.startAll();
    } catch (err) {
      await group.stop();
      throw err;
    }
    return group;
  }

  /** The programs' settings that reach the primary through the sentinels. */
  get env(): Record<string, string> {
    const { password, sentinelPassword } = this.options;
    return {
      REDIS_SENTINELS: this.sentinelPorts.map((p) => `127.0.0.1:${p}`).join(','),
      REDIS_SENTINEL_MASTER: MASTER,
      // The sentinels' answer is where a connection goes; the URL's host is not, its password is.
      REDIS_URL: `redis://${password ? `:${encodeURIComponent(password)}@` : ''}ignored.invalid:1`,
      ...(sentinelPassword ? { REDIS_SENTINEL_PASSWORD: sentinelPassword } : {}),
    };
  }

  /** A plain connection to one sentinel, for asking it. */
  sentinel(index = 0): Redis {
    const redis = new Redis({
      port: this.sentinelPorts[index],
      host: '127.0.0.1',
      password: this.options.sentinelPassword,
    });
    redis.on('error', () => {});
    return redis;
  }

  /** The primary's port, as the first sentinel says now. */
  async primaryPort(): Promise<number> {
    const asked = this.sentinel();
    try {
      const [, port] = (await asked.call('SENTINEL', 'get-master-addr-by-name', MASTER)) as [string, string];
      return Number(port);
    } finally {
      asked.disconnect();
    }
  }

  /** The server at `port`'s own URL, with its password, for a test's direct look. */
  urlOf(port: number): string {
    const { password } = this.options;
    return `redis://${password ? `:${encodeURIComponent(password)}@` : ''}127.0.0.1:${port}`;
  }

  /**
   * Resolves with the time (Date.now()) a sentinel announces the failover (+switch-master), once
   * it does: subscribe before the primary is killed. Rejects if none comes within `timeoutMs`.
   */
  async watchSwitch(timeoutMs = 60_000): Promise<{ switched: Promise<number>; close: () => void }> {
    const watcher = this.sentinel();
    let timer: NodeJS.Timeout | undefined;
    const switched = new Promise<number>((resolve, reject) => {
      watcher.on('message', (channel: string) => channel === '+switch-master' && resolve(Date.now()));
      timer = setTimeout(() => reject(new Error(`no failover announced within ${timeoutMs} ms`)), timeoutMs);
    });
    // Awaited later, by the test: its rejection is reported there, not as an unhandled one.
    switched.catch(() => {});
    await watcher.subscribe('+switch-master');
    return {
      switched,
      close: () => {
        clearTimeout(timer);
        watcher.disconnect();
      },
    };
  }

  async stop(): Promise<void> {
    await Promise.all([
      ...this.sentinels.map((s) => s.stop('SIGKILL')),
      ...[...this.servers.values()].map((s) => s.stop('SIGKILL')),
    ]);
    fs.rmSync(this.dir, { recursive: true, force: true });
  }

  /** A server of the pair: the primary, or (`replicaOf`) its replica. */
  private async server(replicaOf?: number): Promise<PrivateRedis> {
    const { password } = this.options;
    const port = await freePort();
    const server = new PrivateRedis(port, undefined, {
      args: [
        ...(password ? ['--requirepass', password, '--masterauth', password] : []),
        ...(replicaOf ? ['--replicaof', '127.0.0.1', String(replicaOf)] : []),
      ],
      target: this.urlOf(port),
    });
    await server.start();
    this.servers.set(port, server);
    return server;
  }

  private async startAll(): Promise<void> {
    const primary = await this.server();
    const replica = await this.server(primary.port);
    const info = new Redis(this.urlOf(replica.port));
    try {
      await waitFor('the replica in sync', async () => /master_link_status:up/.test(await info.info('replication')));
    } finally {
      info.disconnect();
    }
    for (const port of this.sentinelPorts) this.sentinels.push(this.startSentinel(port, primary.port));
    // Each sentinel must know the replica (from the primary's INFO) and its two peers (from their
    // hellos), or a failover could find no quorum, or nothing to promote.
    for (let i = 0; i < this.sentinelPorts.length; i++) {
      const asked = this.sentinel(i);
      try {
        await waitFor(
          `sentinel ${i} knowing the replica and its peers`,
          async () => {
            const replicas = (await asked.call('SENTINEL', 'replicas', MASTER)) as unknown[];
            const peers = (await asked.call('SENTINEL', 'sentinels', MASTER)) as unknown[];
            return replicas.length === 1 && peers.length === this.sentinelPorts.length - 1;
          },
          30_000,
          100,
        );
      } finally {
        asked.disconnect();
      }
    }
  }

  private startSentinel(port: number, primaryPort: number): Proc {
    const file = path.join(this.dir, `sentinel-${port}.conf`);
    // Sentinel rewrites its file as it learns (peers, replicas, the new primary): one of its own.
    fs.writeFileSync(
      file,
      [
        `port ${port}`,
        'bind 127.0.0.1',
        `dir ${this.dir}`,
        `sentinel monitor ${MASTER} 127.0.0.1 ${primaryPort} 2`,
        ...(this.options.password ? [`sentinel auth-pass ${MASTER} ${this.options.password}`] : []),
        // A sentinel's own password, which its peers give it too, asking it for its vote.
        ...(this.options.sentinelPassword
          ? [`requirepass ${this.options.sentinelPassword}`, `sentinel sentinel-pass ${this.options.sentinelPassword}`]
          : []),
        `sentinel down-after-milliseconds ${MASTER} ${this.options.downAfterMs}`,
        `sentinel failover-timeout ${MASTER} ${this.options.failoverTimeoutMs ?? 10_000}`,
        `sentinel parallel-syncs ${MASTER} 1`,
        '',
      ].join('\n'),
    );
    const child = spawn('redis-server', [file, '--sentinel'], { stdio: ['ignore', 'pipe', 'pipe'] });
    child.on('error', () => {});
    return new Proc(`sentinel:${port}`, child);
  }
}
