import type { Server } from 'node:net';

/**
 * Caps the connections one client address holds open once the gateway is crowded: past half of
 * MAX_CONNECTIONS held in all, a connection from an address that already holds `maxPerClient` is
 * closed on arrival. MAX_CONNECTIONS bounds them all together, and one client alone could take all
 * of them (idle, header-only or slowly dripping connections cost it nearly nothing), refusing
 * everyone else; so one address holds at most half of them, or its cap, whichever is more. Below
 * half, one address may hold as many as it likes: a proxy or a load generator is one address for
 * many clients, and refusing it with room to spare would refuse them all. `dropped` hears of each
 * connection closed for it.
 */
export function capConnectionsPerClient(
  server: Server,
  limits: { maxPerClient: number; maxConnections: number },
  dropped: () => void,
): void {
  const open = new Map<string, number>();
  let total = 0;
  server.on('connection', (socket) => {
    const client = socket.remoteAddress ?? '';
    const held = open.get(client) ?? 0;
    if (held >= limits.maxPerClient && total >= limits.maxConnections / 2) {
      socket.destroy();
      dropped();
      return;
    }
    open.set(client, held + 1);
    total++;
    socket.once('close', () => {
      total--;
      const left = (open.get(client) ?? 1) - 1;
      if (left > 0) open.set(client, left);
      else open.delete(client);
    });
  });
}
