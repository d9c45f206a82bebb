import { type Json, jsonText } from "./json.js";
import { call, native } from "./native.js";

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
