// The addon built from js/native (napi-rs) and its loader and types, both generated from the Rust
// by @napi-rs/cli (binding/): oncebox-core's rules, the store's statements, and what the core
// knows that this package uses (`facts`).
import * as binding from "../binding/index.js";
import type { CallIdentity, Facts, RefusalCode, Rules, Status, StatusFacts } from "../binding/index.js";

import { ConfigError, InvalidIntent } from "./errors.js";

/** The addon. */
export const native = binding;

export type { CallIdentity as NativeCallIdentity, Facts, Rules as NativeRules, Status, StatusFacts };

/** What the core knows: the statuses and their sets, the endings, defaults, parameter lists. */
export const FACTS = binding.facts();

/** The store's statements. */
export const STATEMENTS = binding.statements();

/** Runs `f`, turning the addon's refusals (an `Error` with a `RefusalCode` as its `code`, and
 * `field` and `reason`) into the package's typed errors. */
export function call<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    throw typed(e);
  }
}

const REFUSALS: Record<RefusalCode, new (field: string, reason: string) => Error> = {
  InvalidIntent,
  ConfigError,
};

function typed(e: unknown): unknown {
  if (!(e instanceof Error)) {
    return e;
  }
  const { code, field, reason } = e as Error & { code?: unknown; field?: unknown; reason?: unknown };
  if (typeof code !== "string" || !(code in REFUSALS) || typeof field !== "string" || typeof reason !== "string") {
    return e;
  }
  return new REFUSALS[code as RefusalCode](field, reason);
}
