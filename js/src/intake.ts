import { readFileSync } from "node:fs";

import { type Json, jsonText } from "./json.js";
import { type NativeCallIdentity, type NativeRules, call, native } from "./native.js";

/** One intent's fields, as `Intake.prepare` checks them. */
export interface NewIntent {
  tenant: string;
  key: string;
  action: string;
  /** The arguments: a JSON value, or its text (kept exactly; a `bigint` is written as digits). */
  arguments: Json | string;
  businessRef?: string | null;
  runId?: string | null;
  step?: string | null;
  orderingKey?: string | null;
}

/** What an intent is recorded as. */
export interface Prepared {
  /** The arguments as JSON text, as the caller gave them. */
  argumentsJson: string;
  /** The arguments after redaction, as JSON text: what the journal keeps. */
  payload: string;
  /** Whether redaction changed them (the outbox keeps the originals to deliver). */
  redacted: boolean;
  /** The request hash (RFC 8785 JSON, SHA-256). */
  requestHash: string;
  /** Distinct people who must approve it before it is sent; `null` when none must. */
  approvals: number | null;
  /** How long they have, in seconds. */
  approvalWindow: number | null;
}

/** How an intake is built. */
export interface IntakeOptions {
  /** The `ONCEBOX_REDACTION_KEYS` format; read from that variable when absent. */
  redactionKeys?: string;
  /** Who submits: a person or service name, recorded as `user:NAME`. */
  principal?: string;
}

/** The principal a writer names itself (`user:NAME`); `InvalidIntent` naming `principal` when the name cannot be one. */
export function principalOf(name: string): string {
  return call(() => native.principal(name));
}

/**
 * Accepts intents for the configured actions: validation, redaction and the request hash are
 * `oncebox-core`'s, exactly as the Rust intake (and the Python package) apply them. Build one at
 * start-up and pass it as `config` to every `submit`.
 */
export class Intake {
  private constructor(
    private readonly rules: NativeRules,
    /** The submitter this intake records (`user:NAME`), if it names one. */
    readonly principal: string | null,
  ) {}

  /**
   * The intake of a TOML configuration (`oncebox.toml`'s text); `redactionKeys` is the
   * `ONCEBOX_REDACTION_KEYS` format (`id:secret[,older…]`), read from that variable when absent.
   * `principal` names the person or service that submits (recorded as `user:NAME`; it may not
   * approve what it submits); without one the journal records the database role (`db:ROLE`).
   * Throws `ConfigError` naming the field, or `InvalidIntent` naming `principal`.
   */
  static fromToml(text: string, options: IntakeOptions = {}): Intake {
    const rules = call(() => new native.Rules(text, options.redactionKeys ?? null));
    const principal = options.principal == null ? null : principalOf(options.principal);
    return new Intake(rules, principal);
  }

  /** `Intake.fromToml` of the file at `path`. */
  static load(path: string, options: IntakeOptions = {}): Intake {
    return Intake.fromToml(readFileSync(path, "utf8"), options);
  }

  /** The actions this intake accepts, in order. */
  get actions(): string[] {
    return this.rules.actions;
  }

  /** Checks every field and returns what the intent is recorded as (`InvalidIntent` names the field). */
  prepare(intent: NewIntent): Prepared {
    const argumentsJson = jsonText(intent.arguments, "arguments");
    const p = call(() =>
      this.rules.prepare({
        tenant: intent.tenant,
        key: intent.key,
        action: intent.action,
        arguments: argumentsJson,
        ...optional("businessRef", intent.businessRef),
        ...optional("runId", intent.runId),
        ...optional("step", intent.step),
        ...optional("orderingKey", intent.orderingKey),
      }),
    );
    return {
      argumentsJson,
      payload: p.payload,
      redacted: p.redacted,
      requestHash: p.requestHash,
      approvals: p.approvals ?? null,
      approvalWindow: p.approvalWindow ?? null,
    };
  }

  /** The lane `action`'s intents with an ordering key queue in. */
  lane(action: string): { destination: string; skipFailed: boolean } {
    return call(() => this.rules.lane(action));
  }

  /** Whether a submit whose key names a recorded intent repeats its request (also across a
   * rotation of redaction keys). */
  isReplay(action: string, prepared: Prepared, recordedHash: string, recordedPayload: string): boolean {
    return call(() =>
      this.rules.isReplay({
        action,
        arguments: prepared.argumentsJson,
        submittedHash: prepared.requestHash,
        recordedHash,
        recordedPayload,
      }),
    );
  }

  /** The identity of a call of `action` with `arguments` that names no key and no run. */
  callIdentity(action: string, args: Json | string): NativeCallIdentity {
    return call(() => this.rules.callIdentity(action, jsonText(args, "arguments")));
  }
}

/** `{ [name]: value }` when `value` is a string, else nothing: the addon's optional fields. */
function optional<K extends string>(name: K, value: string | null | undefined): Partial<Record<K, string>> {
  return value == null ? {} : ({ [name]: value } as Partial<Record<K, string>>);
}
