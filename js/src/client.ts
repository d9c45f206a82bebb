import { InvalidIntent, OnceboxError } from "./errors.js";
import { type Json, jsonText } from "./json.js";
import { SETTLED, type Status } from "./model.js";
import { validateKey } from "./keys.js";
import { FACTS } from "./native.js";

/** An intent as the HTTP API answers it. */
export interface RemoteIntent {
  idempotencyKey: string;
  action: string;
  status: Status;
  requestHash: string;
  attemptCount: number;
  externalReference: string | null;
  /** The destination's answer, as JSON (parsed by `JSON.parse`). */
  response: unknown;
  error: unknown;
  businessRef: string | null;
  runId: string | null;
  step: string | null;
  deadline: Date | null;
  orderingKey: string | null;
  createdAt: Date;
  updatedAt: Date;
  completedAt: Date | null;
}

/** An RFC 9457 problem the API answered with: a refusal, never retried as is. */
export class ApiError extends OnceboxError {
  override name = "ApiError";
  /**
   * @param status The HTTP status.
   * @param title Its reason phrase.
   * @param detail What went wrong.
   * @param field The field at fault, when one is.
   */
  constructor(
    readonly status: number,
    readonly title: string,
    readonly detail: string,
    readonly field: string | null,
  ) {
    super(`${String(status)} ${title}: ${detail}${field === null ? "" : ` (field ${field})`}`);
  }
}

/**
 * No answer came back after every retry: the intent may or may not exist. Submit again with the
 * same key to find out; it is never created twice.
 */
export class TransportError extends OnceboxError {
  override name = "TransportError";
  /**
   * @param url The URL called.
   * @param attempts Tries made.
   * @param cause The last failure.
   */
  constructor(
    readonly url: string,
    readonly attempts: number,
    cause: unknown,
  ) {
    super(`no answer from ${url} after ${String(attempts)} attempt(s): ${cause instanceof Error ? cause.message : String(cause)}`, {
      cause,
    });
  }
}

/** How transport failures, 5xx and 429 answers are retried (defaults: the core's, as every client's). */
export interface RetryOptions {
  /** Tries in all, the first included (default 6). */
  attempts?: number;
  /** The first wait, in milliseconds (default 100); it doubles, with jitter. */
  minDelayMs?: number;
  /** The longest wait, in milliseconds (default 5,000); a Retry-After is honoured up to it. */
  maxDelayMs?: number;
}

/** What `Client.submit` sends besides the key. */
export interface SubmitRequest {
  action: string;
  arguments: Json | string;
  businessRef?: string;
  runId?: string;
  step?: string;
  deadline?: Date;
  orderingKey?: string;
}

/** The longest wait one request asks the server for, in seconds. */
const MAX_WAIT_SECONDS = FACTS.clientDefaults.maxWaitSeconds;

/**
 * The HTTP API's client, over the platform `fetch`. A submit that gets no answer, a 5xx or a 429
 * is sent again with the same `Idempotency-Key` and the same bytes (Retry-After honoured), so a
 * lost answer never makes a second intent; a refusal is thrown as an `ApiError` (with the field
 * at fault, when one is) and never retried.
 */
export class Client {
  private readonly base: string;
  private readonly attempts: number;
  private readonly minDelayMs: number;
  private readonly maxDelayMs: number;

  /**
   * @param baseUrl Where `oncebox serve` listens (`https://oncebox.internal`).
   * @param token An API token of the tenant (`oncebox ops token create`).
   * @param options The per-request timeout (default 30 s; a long-poll adds its wait) and the retries.
   */
  constructor(
    baseUrl: string,
    private readonly token: string,
    private readonly options: { timeoutMs?: number; retry?: RetryOptions } = {},
  ) {
    const url = new URL(baseUrl);
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new InvalidIntent("base_url", "must be an http:// or https:// URL");
    }
    this.base = url.toString().replace(/\/+$/, "");
    const defaults = FACTS.clientDefaults;
    this.attempts = Math.max(1, options.retry?.attempts ?? defaults.attempts);
    this.minDelayMs = options.retry?.minDelayMs ?? defaults.minDelayMs;
    this.maxDelayMs = options.retry?.maxDelayMs ?? defaults.maxDelayMs;
  }

  /** Submits `request` under `key`; `created` is false for a replay of the same request. */
  async submit(key: string, request: SubmitRequest): Promise<{ intent: RemoteIntent; created: boolean }> {
    validateKey(key);
    const body = [
      `{"action":${JSON.stringify(request.action)}`,
      `,"arguments":${jsonText(request.arguments, "arguments")}`,
      ...optional("business_ref", request.businessRef),
      ...optional("run_id", request.runId),
      ...optional("step", request.step),
      ...optional("deadline", request.deadline?.toISOString()),
      ...optional("ordering_key", request.orderingKey),
      "}",
    ].join("");
    const [status, intent] = await this.call("POST", ["v1", "intents"], {
      "idempotency-key": `"${key.replaceAll("\\", "\\\\").replaceAll('"', '\\"')}"`,
      "content-type": "application/json",
    }, body, this.timeoutMs());
    return { intent, created: status === 202 };
  }

  /** The intent under `key` as it is now (`ApiError` 404 when the tenant has none). */
  async get(key: string): Promise<RemoteIntent> {
    validateKey(key);
    return (await this.call("GET", ["v1", "intents", key], {}, null, this.timeoutMs()))[1];
  }

  /**
   * Waits until the intent under `key` is settled (terminal, or waiting for a person) or
   * `timeoutMs` has passed, long-polling the server; returns the intent as last seen.
   */
  async wait(key: string, timeoutMs: number): Promise<RemoteIntent> {
    validateKey(key);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const left = Math.max(0, deadline - Date.now());
      const seconds = Math.min(MAX_WAIT_SECONDS, Math.floor(left / 1000));
      const [, intent] = await this.call(
        "GET",
        ["v1", "intents", key],
        {},
        null,
        this.timeoutMs() + seconds * 1000,
        `?wait=${String(seconds)}`,
      );
      if (settled(intent.status) || seconds === 0 || Date.now() >= deadline) {
        return intent;
      }
    }
  }

  /**
   * Cancels the intent under `key` before it is dispatched; a retried cancel whose first answer
   * was lost finds it cancelled and returns it. `ApiError` 409 says why not when it may be
   * dispatched, 404 when there is no such key.
   */
  async cancel(key: string): Promise<RemoteIntent> {
    validateKey(key);
    try {
      return (await this.call("POST", ["v1", "intents", key, "cancel"], {}, null, this.timeoutMs()))[1];
    } catch (e) {
      if (e instanceof ApiError && e.status === 409) {
        const current = await this.get(key);
        if (current.status === "cancelled") {
          return current;
        }
      }
      throw e;
    }
  }

  private timeoutMs(): number {
    return this.options.timeoutMs ?? FACTS.clientDefaults.timeoutMs;
  }

  /** One logical call: tried until an answer retrying cannot change, or retries are spent. */
  private async call(
    method: string,
    segments: string[],
    headers: Record<string, string>,
    body: string | null,
    timeoutMs: number,
    query = "",
  ): Promise<[number, RemoteIntent]> {
    const url = `${this.base}/${segments.map(segment).join("/")}${query}`;
    let delay = this.minDelayMs;
    for (let attempt = 1; ; attempt++) {
      let failure: Error;
      let retryAfterMs: number | null = null;
      try {
        const answer = await fetch(url, {
          method,
          headers: { ...headers, authorization: `Bearer ${this.token}` },
          body,
          signal: AbortSignal.timeout(timeoutMs),
        });
        const text = await answer.text();
        if (answer.ok) {
          return [answer.status, intentOf(text, url)];
        }
        failure = problemOf(answer.status, text);
        if (answer.status < 500 && answer.status !== 429) {
          throw failure;
        }
        retryAfterMs = retryAfter(answer.headers.get("retry-after"));
      } catch (e) {
        if (e instanceof OnceboxError) {
          throw e;
        }
        failure = new TransportError(url, attempt, e);
      }
      if (attempt >= this.attempts) {
        throw failure;
      }
      const jittered = delay / 2 + Math.random() * (delay / 2);
      const wait = retryAfterMs === null ? jittered : Math.min(Math.max(retryAfterMs, jittered), Math.max(this.maxDelayMs, jittered));
      await new Promise((r) => setTimeout(r, wait));
      delay = Math.min(delay * 2, this.maxDelayMs);
    }
  }
}

function optional(name: string, value: string | undefined): string[] {
  return value === undefined ? [] : [`,${JSON.stringify(name)}:${JSON.stringify(value)}`];
}

/** One path segment, percent-encoded (`.` and `..`, which would change the path, are refused
 * as keys before any URL is made). */
function segment(s: string): string {
  return encodeURIComponent(s);
}

function settled(status: Status): boolean {
  return SETTLED.has(status);
}

/** Milliseconds from a Retry-After value (seconds, or an HTTP date). */
function retryAfter(value: string | null): number | null {
  if (value === null) {
    return null;
  }
  if (/^\d+$/.test(value.trim())) {
    return Number(value.trim()) * 1000;
  }
  const at = Date.parse(value);
  return Number.isFinite(at) ? Math.max(0, at - Date.now()) : null;
}

function problemOf(status: number, text: string): ApiError {
  let doc: Record<string, unknown> = {};
  try {
    const parsed: unknown = JSON.parse(text);
    if (typeof parsed === "object" && parsed !== null) {
      doc = parsed as Record<string, unknown>;
    }
  } catch {
    // Not a problem document: the status and the text say what there is.
  }
  const detail = typeof doc.detail === "string" ? doc.detail : text.slice(0, 512);
  const field = typeof doc.field === "string" ? doc.field : null;
  return new ApiError(status, typeof doc.title === "string" ? doc.title : "", detail, field);
}

function date(value: unknown): Date | null {
  return typeof value === "string" ? new Date(value) : null;
}

function textOrNull(value: unknown): string | null {
  return typeof value === "string" ? value : null;
}

function intentOf(text: string, url: string): RemoteIntent {
  const doc = JSON.parse(text) as Record<string, unknown>;
  const created = date(doc.created_at);
  const updated = date(doc.updated_at);
  if (typeof doc.idempotency_key !== "string" || typeof doc.status !== "string" || created === null || updated === null) {
    throw new OnceboxError(`unexpected answer from ${url}: ${text.slice(0, 512)}`);
  }
  return {
    idempotencyKey: doc.idempotency_key,
    action: String(doc.action),
    status: doc.status as Status,
    requestHash: String(doc.request_hash),
    attemptCount: Number(doc.attempt_count),
    externalReference: textOrNull(doc.external_reference),
    response: doc.response ?? null,
    error: doc.error ?? null,
    businessRef: textOrNull(doc.business_ref),
    runId: textOrNull(doc.run_id),
    step: textOrNull(doc.step),
    deadline: date(doc.deadline),
    orderingKey: textOrNull(doc.ordering_key),
    createdAt: created,
    updatedAt: updated,
    completedAt: date(doc.completed_at),
  };
}
