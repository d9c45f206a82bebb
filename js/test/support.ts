// What the tests share: a scratch database migrated by the oncebox binary, and that binary.
import { execFile, execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import pg from "pg";

/**
 * The repository: ONCEBOX_REPO when the tests run from a project that installed the packed
 * package (scripts/js-tests.sh), else the checkout the compiled tests sit in (js/build/test).
 */
export const REPO = process.env.ONCEBOX_REPO ?? join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

/** The package's sources in the repository. */
export const JS = join(REPO, "js");

const root = REPO;

/** The oncebox binary the Rust tests built (ONCEBOX_BIN overrides). */
export const BIN = process.env.ONCEBOX_BIN ?? join(root, "target", "debug", "oncebox");

const server = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

/** Runs the oncebox binary; resolves with stdout. */
export async function oncebox(args: string[], env: Record<string, string> = {}): Promise<string> {
  const { stdout } = await promisify(execFile)(BIN, args, {
    env: { ...process.env, ...env },
    maxBuffer: 1 << 24,
  });
  return stdout;
}

/** A database of the test's own, migrated; `drop()` removes it. */
export class Scratch {
  private constructor(
    readonly name: string,
    readonly url: string,
  ) {}

  static async create(test: string): Promise<Scratch> {
    const name = `oncebox_js_${test}_${randomBytes(4).toString("hex")}`;
    const admin = new pg.Client({ connectionString: server });
    await admin.connect();
    try {
      await admin.query(`CREATE DATABASE ${name}`);
    } finally {
      await admin.end();
    }
    const url = new URL(server);
    url.pathname = `/${name}`;
    execFileSync(BIN, ["migrate"], { env: { ...process.env, DATABASE_URL: url.toString() } });
    return new Scratch(name, url.toString());
  }

  /** A connected client of this database (the caller ends it). */
  async client(): Promise<pg.Client> {
    const client = new pg.Client({ connectionString: this.url });
    await client.connect();
    return client;
  }

  /** The single value a query returns. */
  async scalar(text: string, values: unknown[] = []): Promise<unknown> {
    const client = await this.client();
    try {
      const { rows } = await client.query<Record<string, unknown>>(text, values);
      const first = rows[0];
      return first === undefined ? undefined : Object.values(first)[0];
    } finally {
      await client.end();
    }
  }

  async drop(): Promise<void> {
    const admin = new pg.Client({ connectionString: server });
    await admin.connect();
    try {
      await admin.query(`DROP DATABASE ${this.name} WITH (FORCE)`);
    } finally {
      await admin.end();
    }
  }
}

/** A free TCP port on loopback. */
export async function freePort(): Promise<number> {
  const { createServer } = await import("node:net");
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => {
        if (address !== null && typeof address === "object") {
          resolve(address.port);
        } else {
          reject(new Error("no port"));
        }
      });
    });
  });
}

/** Waits until `done()` holds, polling every 100 ms, failing after `seconds`. */
export async function waitUntil(what: string, done: () => Promise<boolean>, seconds = 30): Promise<void> {
  const deadline = Date.now() + seconds * 1000;
  while (!(await done())) {
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${String(seconds)} s waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A running oncebox process (`oncebox receiver`, `oncebox worker`…); `stop()` ends it. */
export class Proc {
  private constructor(private readonly child: import("node:child_process").ChildProcess) {}

  static async start(args: string[], env: Record<string, string> = {}, port?: number): Promise<Proc> {
    const { spawn } = await import("node:child_process");
    const child = spawn(BIN, args, { env: { ...process.env, ...env }, stdio: "ignore" });
    const proc = new Proc(child);
    if (port !== undefined) {
      const { connect } = await import("node:net");
      await waitUntil(`${args[0] ?? "oncebox"} on port ${String(port)}`, () =>
        new Promise((resolve) => {
          const socket = connect(port, "127.0.0.1");
          socket.once("connect", () => {
            socket.destroy();
            resolve(true);
          });
          socket.once("error", () => {
            resolve(false);
          });
        }),
      );
    }
    return proc;
  }

  /** SIGTERM, then waits for the exit; resolves with the exit code. */
  async stop(): Promise<number | null> {
    if (this.child.exitCode !== null) {
      return this.child.exitCode;
    }
    const exited = new Promise<number | null>((resolve) => this.child.once("exit", resolve));
    this.child.kill("SIGTERM");
    return exited;
  }
}
