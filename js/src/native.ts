// The addon built from js/native (napi-rs): oncebox-core's rules and the store's statements.
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

import { ConfigError, InvalidIntent, OnceboxError } from "./errors.js";

/** What a new intent is recorded as, and what its action's approval policy asks of it. */
export interface NativePrepared {
  payload: string;
  redacted: boolean;
  requestHash: string;
  approvals?: number | null;
  approvalWindow?: number | null;
}

/** The lane an action's intents with an ordering key queue in. */
export interface NativeLane {
  destination: string;
  skipFailed: boolean;
}

/** The identity of a call that names no key and no run (Unix seconds). */
export interface NativeCallIdentity {
  readonly window: number;
  keysAt(at: number): string[];
  keyFor(at: number, previousCreated?: number | null): string;
}

/** The rules of an intake. */
export interface NativeRules {
  callIdentity(action: string, argumentsJson: string): NativeCallIdentity;
  readonly actions: string[];
  prepare(
    tenant: string,
    key: string,
    action: string,
    argumentsJson: string,
    businessRef: string | null,
    runId: string | null,
    step: string | null,
    orderingKey: string | null,
  ): NativePrepared;
  lane(action: string): NativeLane;
  isReplay(
    action: string,
    argumentsJson: string,
    submittedHash: string,
    recordedHash: string,
    recordedPayload: string,
  ): boolean;
}

/** The store's statements and names. */
export interface NativeStatements {
  submit: string;
  submitOrdered: string;
  intentByKey: string;
  outboxChannel: string;
  maxSafeInteger: number;
  redactionKeysEnv: string;
  version: string;
}

interface Native {
  validateKey(key: string): void;
  businessKey(tenant: string, action: string, businessId: string, version: string): string;
  deliveryKey(tenant: string, key: string): string;
  principal(name: string): string;
  stepKey(session: string, step: number, tool: string, argumentsJson: string): string;
  canonicalJson(document: string): string;
  requestHash(action: string, argumentsJson: string): string;
  Rules: new (config: string, redactionKeys?: string | null) => NativeRules;
  CallIdentity: new (
    tool: string,
    argumentsJson: string,
    pointers: string[] | null,
    window: number,
  ) => NativeCallIdentity;
  statements(): NativeStatements;
}

/** Where the addon is: beside the package's `dist/` (installed), or above `build/src/` (tests). */
function addonPath(): string {
  for (const relative of ["../oncebox.node", "../../oncebox.node"]) {
    const path = fileURLToPath(new URL(relative, import.meta.url));
    if (existsSync(path)) {
      return path;
    }
  }
  throw new OnceboxError(
    "oncebox.node not found beside the package: build it with `npm run build:native` (cargo)",
  );
}

const require = createRequire(import.meta.url);

/** The addon. */
export const native = require(addonPath()) as Native;

/** Runs `f`, turning the addon's refusals into the package's typed errors. */
export function call<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    throw typed(e);
  }
}

function typed(e: unknown): unknown {
  if (!(e instanceof Error) || !e.message.startsWith("{")) {
    return e;
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(e.message);
  } catch {
    return e;
  }
  if (typeof parsed !== "object" || parsed === null) {
    return e;
  }
  const { kind, field, reason } = parsed as Record<string, unknown>;
  if (typeof field !== "string" || typeof reason !== "string") {
    return e;
  }
  if (kind === "InvalidIntent") {
    return new InvalidIntent(field, reason);
  }
  if (kind === "ConfigError") {
    return new ConfigError(field, reason);
  }
  return e;
}
