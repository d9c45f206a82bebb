import { FACTS, type Status } from "./native.js";

export type { Status };

/** Every status, in the core's order. */
export const STATUSES: readonly Status[] = FACTS.statuses.map((s) => s.status);

/** The statuses that never change again (from the core). */
export const TERMINAL: ReadonlySet<Status> = new Set(FACTS.statuses.filter((s) => s.terminal).map((s) => s.status));

/** The statuses only a person moves on (from the core). */
export const WAITING_FOR_A_PERSON: ReadonlySet<Status> = new Set(
  FACTS.statuses.filter((s) => s.waitsForAPerson).map((s) => s.status),
);

/** Terminal, or waiting for a person: nothing more happens by itself (from the core). */
export const SETTLED: ReadonlySet<Status> = new Set(FACTS.statuses.filter((s) => s.settled).map((s) => s.status));

/** One intent, as the journal holds it. */
export interface Intent {
  id: string;
  tenantId: string;
  idempotencyKey: string;
  action: string;
  status: Status;
  requestHash: string;
  /** The arguments after redaction, as JSON text (read it with a parser that keeps big integers). */
  payload: string;
  businessRef: string | null;
  runId: string | null;
  step: string | null;
  deadline: Date | null;
  orderingKey: string | null;
  createdAt: Date;
}

/** What `submit` returns: the intent under the key, and whether this call created it. */
export interface Submitted {
  intent: Intent;
  created: boolean;
}
