import { type Json, jsonText } from "./json.js";
import { type NativeCallIdentity, call, native } from "./native.js";

/** Throws `InvalidIntent` (field `idempotency_key`) for a key oncebox cannot use. */
export function validateKey(key: string): void {
  call(() => {
    native.validateKey(key);
  });
}

/** The key of a business operation: hex SHA-256 of `tenant|action|businessId|version`. */
export function businessKey(
  tenant: string,
  action: string,
  businessId: string,
  version = "1",
): string {
  return native.businessKey(tenant, action, businessId, version);
}

/**
 * What every destination sees as the identity of `tenant`'s intent `key` (`Idempotency-Key`,
 * `webhook-id`, AMQP `message_id`): unique across tenants, `TENANT:KEY` where that is
 * unambiguous and fits in 255 bytes, else a digest of both.
 */
export function deliveryKey(tenant: string, key: string): string {
  return native.deliveryKey(tenant, key);
}

/**
 * The key of an agent's tool call at one step of a run: hex SHA-256 of `session:step:tool:` and
 * the canonical JSON (RFC 8785) of its arguments — the same key the Python wrapper and the MCP
 * gateway derive.
 */
export function stepKey(session: string, step: number, tool: string, args: Json | string): string {
  return call(() => native.stepKey(session, step, tool, jsonText(args, "arguments")));
}

/** The RFC 8785 canonical form of a JSON document (an integer beyond ±2^53 is refused). */
export function canonicalJson(document: Json | string): string {
  return call(() => native.canonicalJson(jsonText(document, "document")));
}

/** The request hash of `action` with `args` as given, without redaction. */
export function requestHash(action: string, args: Json | string): string {
  return call(() => native.requestHash(action, jsonText(args, "arguments")));
}

/** How a tool call that names no key and no run is identified. */
export interface CallIdentityOptions {
  /** The tool (the action). */
  tool: string;
  /** Its arguments. */
  arguments: Json | string;
  /** JSON pointers to the arguments that identify the call; all of them when absent. */
  pointers?: readonly string[];
  /** Within how many seconds an identical call is the same intent (at least 1; a day by default). */
  window?: number;
}

/**
 * The identity of a tool call that names no key and no run, as the tool wrapper, the Python
 * package and the MCP gateway derive it: one intent per dedupe window, from its first call.
 * `keysAt(unixSeconds)` gives the key of the window a time falls in and of the one before it;
 * `keyFor(unixSeconds, previousCreated)` the key a call then takes.
 */
export function callIdentity(options: CallIdentityOptions): NativeCallIdentity {
  const { tool, pointers, window = 86_400 } = options;
  const text = jsonText(options.arguments, "arguments");
  return call(
    () =>
      new native.CallIdentity({
        tool,
        arguments: text,
        ...(pointers === undefined ? {} : { pointers: [...pointers] }),
        window,
      }),
  );
}
