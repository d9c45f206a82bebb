/** The base of every error oncebox throws. */
export class OnceboxError extends Error {
  override name = "OnceboxError";
}

/** A field of an intent is not acceptable; nothing was written. Never retry as is. */
export class InvalidIntent extends OnceboxError {
  override name = "InvalidIntent";
  /**
   * @param field The field at fault: `idempotency_key`, `action`, `arguments/amount`…
   * @param reason What is wrong and what to do instead.
   */
  constructor(
    readonly field: string,
    readonly reason: string,
  ) {
    super(`${field}: ${reason}`);
  }
}

/** The TOML configuration (or the redaction keys) cannot be used. */
export class ConfigError extends OnceboxError {
  override name = "ConfigError";
  /**
   * @param field The dotted path of the field (`destinations.billing.timeout`), or line and column.
   * @param reason What is wrong.
   */
  constructor(
    readonly field: string,
    readonly reason: string,
  ) {
    super(`${field}: ${reason}`);
  }
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
