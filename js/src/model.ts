/** Where an intent stands (the journal's `status`). */
export type Status =
  | "awaiting_approval"
  | "pending"
  | "in_flight"
  | "unknown"
  | "reconciling"
  | "needs_review"
  | "succeeded"
  | "failed"
  | "cancelled"
  | "expired"
  | "rejected";

/** The statuses that never change again. */
export const TERMINAL: ReadonlySet<Status> = new Set([
  "succeeded",
  "failed",
  "cancelled",
  "expired",
  "rejected",
]);

/** The statuses only a person moves on. */
export const WAITING_FOR_A_PERSON: ReadonlySet<Status> = new Set([
  "needs_review",
  "awaiting_approval",
]);

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
