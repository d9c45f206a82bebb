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

/** The key already names an intent with another request; nothing was written. */
export class KeyConflict extends OnceboxError {
  override name = "KeyConflict";
  /**
   * @param key The idempotency key.
   * @param submittedHash The request hash of this submit.
   * @param recordedHash The request hash the key was recorded with.
   */
  constructor(
    readonly key: string,
    readonly submittedHash: string,
    readonly recordedHash: string,
  ) {
    super(
      `idempotency key ${JSON.stringify(key)} already names another request ` +
        `(recorded ${recordedHash}, submitted ${submittedHash}): use a new key for a new request`,
    );
  }
}

/** An intent as an outcome error carries it: the HTTP API's view of it. */
export interface OutcomeIntent {
  idempotencyKey: string;
  status: string;
  error: unknown;
}

/** A tool call whose intent did not succeed: `intent` says how it stands. */
export class IntentError extends OnceboxError {
  override name = "IntentError";
  /**
   * @param intent The intent as last seen.
   * @param message What happened, for a person (and a model).
   */
  constructor(
    readonly intent: OutcomeIntent,
    message: string,
  ) {
    super(message);
  }
}

/** The intent ended `failed` or `expired`: the destination refused it, or its time ran out. */
export class IntentFailed extends IntentError {
  override name = "IntentFailed";
}

/** The intent was cancelled before it was sent. */
export class IntentCancelled extends IntentError {
  override name = "IntentCancelled";
}

/** The outcome is unknown and a person must decide (`needs_review`). */
export class NeedsReview extends IntentError {
  override name = "NeedsReview";
}

/** The intent waits for people to approve it; nothing was sent. Call again later. */
export class AwaitingApproval extends IntentError {
  override name = "AwaitingApproval";
}

/** A person rejected the intent; it was never sent. */
export class Rejected extends IntentError {
  override name = "Rejected";
}

/** The wait ended before the intent settled. Call again later: it is the same intent. */
export class WaitTimeout extends IntentError {
  override name = "WaitTimeout";
}
