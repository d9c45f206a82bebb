import { readFileSync } from "node:fs";

import { type Json, jsonText } from "./json.js";
import { type NativePrepared, type NativeRules, call, native } from "./native.js";

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

/**
 * Accepts intents for the configured actions: validation, redaction and the request hash are
 * `oncebox-core`'s, exactly as the Rust intake (and the Python package) apply them. Build one at
 * start-up and pass it as `config` to every `submit`.
 */
export class Intake {
  private constructor(readonly rules: NativeRules) {}

  /**
   * The intake of a TOML configuration (`oncebox.toml`'s text); `redactionKeys` is the
   * `ONCEBOX_REDACTION_KEYS` format (`id:secret[,older…]`), read from that variable when absent.
   * Throws `ConfigError` naming the field.
   */
  static fromToml(text: string, options: { redactionKeys?: string } = {}): Intake {
    return new Intake(call(() => new native.Rules(text, options.redactionKeys ?? null)));
  }

  /** `Intake.fromToml` of the file at `path`. */
  static load(path: string, options: { redactionKeys?: string } = {}): Intake {
    return Intake.fromToml(readFileSync(path, "utf8"), options);
  }

  /** The actions this intake accepts, in order. */
  get actions(): string[] {
    return this.rules.actions;
  }

  /** Checks every field and returns what the intent is recorded as (`InvalidIntent` names the field). */
  prepare(intent: NewIntent): Prepared {
    const argumentsJson = jsonText(intent.arguments, "arguments");
    const p: NativePrepared = call(() =>
      this.rules.prepare(
        intent.tenant,
        intent.key,
        intent.action,
        argumentsJson,
        intent.businessRef ?? null,
        intent.runId ?? null,
        intent.step ?? null,
        intent.orderingKey ?? null,
      ),
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
}
