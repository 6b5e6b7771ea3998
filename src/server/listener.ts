import { createServer, type Server, type Socket } from 'node:net';

/** A TCP listener that knows its sockets, so that stopping can end them all and destroy the ones
 * whose peer does not close within a grace period. */
export class TcpListener {
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();

  constructor(onSocket: (s: Socket) => void) {
    this.server = createServer({ noDelay: true }, (socket) => {
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
      onSocket(socket);
    });
  }

  /** Resolves with the bound port (port 0 picks a free one). */
  listen(host: string, port: number): Promise<number> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error): void => reject(err);
      this.server.once('error', onError);
      this.server.listen({ host, port }, () => {
        this.server.off('error', onError);
        const addr = this.server.address();
        resolve(typeof addr === 'object' && addr !== null ? addr.port : port);
      });
    });
  }

  /** Stops accepting; resolves once every socket has closed, destroying stragglers after graceMs. */
  close(graceMs: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        for (const s of this.sockets) s.destroy();
      }, graceMs);
      this.server.close(() => {
        clearTimeout(timer);
        resolve();
      });
      if (this.sockets.size === 0) clearTimeout(timer);
    });
  }
}
