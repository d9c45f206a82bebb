/** The base of every error oncebox throws. */
export class OnceboxError extends Error {
  override name = "OnceboxError";
}

/** An error about one named field: `field` says which, `reason` what is wrong. */
export class FieldError extends OnceboxError {
  override name = "FieldError";
  /**
   * @param field The field at fault.
   * @param reason What is wrong and what to do instead.
   */
  constructor(
    readonly field: string,
    readonly reason: string,
  ) {
    super(`${field}: ${reason}`);
  }
}

/**
 * A field of an intent is not acceptable (`idempotency_key`, `action`, `arguments/amount`…);
 * nothing was written. Never retry as is.
 */
export class InvalidIntent extends FieldError {
  override name = "InvalidIntent";
}

/**
 * The TOML configuration (or the redaction keys) cannot be used: `field` is the dotted path
 * (`destinations.billing.timeout`), or line and column.
 */
export class ConfigError extends FieldError {
  override name = "ConfigError";
}

/**
 * The key already names an intent of this tenant with another request; nothing was written.
 * Never retry as is: choose another key, or resend the original request.
 */
export class KeyConflict extends OnceboxError {
  override name = "KeyConflict";
  /** The field at fault. */
  readonly field = "idempotency_key";
  /**
   * @param idempotencyKey The idempotency key.
   * @param existingId The id of the intent the key names.
   * @param existingHash The request hash the key was recorded with.
   * @param submittedHash The request hash of this submit.
   */
  constructor(
    readonly idempotencyKey: string,
    readonly existingId: string,
    readonly existingHash: string,
    readonly submittedHash: string,
  ) {
    super(
      `idempotency key ${JSON.stringify(idempotencyKey)} already names intent ${existingId} with ` +
        `request hash ${existingHash}; this request's hash is ${submittedHash}`,
    );
  }
}

/** An intent as an outcome error carries it: the HTTP API's view of it. */
export interface OutcomeIntent {
  idempotencyKey: string;
  action: string;
  status: string;
  error: unknown;
}

/** A tool call whose intent did not succeed: `intent` says how it stands. */
export class NotSucceeded extends OnceboxError {
  override name = "NotSucceeded";
  /**
   * @param intent The intent as last seen.
   * @param message What happened, for a person (and a model).
   */
  constructor(
    readonly intent: OutcomeIntent,
    message: string,
  ) {
    super(`intent ${JSON.stringify(intent.idempotencyKey)} (${intent.action}): ${message}`);
  }
}

/** The intent failed for good (`failed`, or `expired` before an attempt). */
export class IntentFailed extends NotSucceeded {
  override name = "IntentFailed";
}

/** The intent was cancelled before it was sent. */
export class IntentCancelled extends NotSucceeded {
  override name = "IntentCancelled";
}

/** Its outcome is unknown and a person must decide (`needs_review`): do not act again until they have. */
export class NeedsReview extends NotSucceeded {
  override name = "NeedsReview";
}

/**
 * It waits for people to approve it (its action's approval policy): nothing was sent. Not slow,
 * not failed: tell the user, and look again later with the same call (the same key finds it).
 */
export class AwaitingApproval extends NotSucceeded {
  override name = "AwaitingApproval";
}

/** A person rejected it while it awaited approval: it was never sent, and never will be. */
export class Rejected extends NotSucceeded {
  override name = "Rejected";
}

/** The intent was not settled within the wait; it goes on by itself. Call again later. */
export class WaitTimeout extends NotSucceeded {
  override name = "WaitTimeout";
}

/** The error class of each ending the core names (`facts().statuses[].ending.error`). */
export const ENDING_ERRORS: Readonly<Record<string, new (intent: OutcomeIntent, message: string) => NotSucceeded>> = {
  IntentFailed,
  IntentCancelled,
  NeedsReview,
  AwaitingApproval,
  Rejected,
  WaitTimeout,
};
