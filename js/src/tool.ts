import { ApiError, type Client, type RemoteIntent } from "./client.js";
import { ENDING_ERRORS, OnceboxError } from "./errors.js";
import { type Json, jsonText } from "./json.js";
import { stepKey } from "./keys.js";
import { FACTS, call, native } from "./native.js";

/** Where a tool call comes from: the agent's run (`session`) and the step within it. */
export interface ToolContext {
  session?: string;
  step?: number;
}

/** How `onceboxTool` submits and waits. */
export interface ToolOptions {
  /** The HTTP client (its retries keep the same key and bytes). */
  via: Client;
  /** How long a call waits for the outcome, in milliseconds (default 30,000). */
  timeoutMs?: number;
  /**
   * How a call without a session and step is identified: JSON pointers into its arguments
   * (`["/order_id"]`, the action's business key); all the arguments when absent. Give the same
   * as the action's `[actions.X.tool] key` when agents also reach it over MCP.
   */
  key?: string[];
  /** Within how many seconds an identical call without a run is the same intent (a day). */
  dedupeWindow?: number;
}

/** The succeeded intent, or the typed error its ending calls for (the core's `Status::ending`). */
export function outcome(intent: RemoteIntent): RemoteIntent {
  const ending = FACTS.statuses.find((s) => s.status === intent.status)?.ending;
  if (ending === undefined) {
    return intent;
  }
  let message = ending.message.replaceAll("{status}", intent.status);
  const detail = (intent.error as { detail?: unknown } | null)?.detail;
  if (ending.withDetail && typeof detail === "string" && detail !== "") {
    message = `${message}: ${detail}`;
  }
  const error = ENDING_ERRORS[ending.error];
  if (error === undefined) {
    throw new OnceboxError(`the core names an ending this package does not know: ${ending.error}`);
  }
  throw new error(intent, message);
}

/**
 * An idempotent tool: `execute(args, ctx)` submits `action` with `args` under the call's key,
 * waits, and returns the succeeded intent or throws a typed error per outcome (`IntentFailed`,
 * `IntentCancelled`, `NeedsReview`, `AwaitingApproval`, `Rejected`, `WaitTimeout`). The key is
 * the call's identity, by the rule the Python wrapper and the MCP gateway follow:
 * `stepKey(session, step, action, args)` when `ctx` gives a session and a step (a retry of the
 * step finds the same intent); else the action's identifying arguments (`key`), or all of them,
 * within the dedupe window of the first call.
 */
export function onceboxTool(
  action: string,
  options: ToolOptions,
): { execute: (args: Json, ctx?: ToolContext) => Promise<RemoteIntent> } {
  const timeoutMs = options.timeoutMs ?? FACTS.clientDefaults.toolWaitMs;
  const client = options.via;
  return {
    async execute(args: Json, ctx: ToolContext = {}): Promise<RemoteIntent> {
      const { session, step } = ctx;
      if (session !== undefined && step !== undefined) {
        const key = stepKey(session, step, action, args);
        await client.submit(key, { action, arguments: args, runId: session, step: String(step) });
        return outcome(await client.wait(key, timeoutMs));
      }
      const text = jsonText(args, "arguments");
      const identity = call(
        () =>
          new native.CallIdentity({
            tool: action,
            arguments: text,
            ...(options.key === undefined ? {} : { pointers: options.key }),
            window: options.dedupeWindow ?? 86_400,
          }),
      );
      const at = Date.now() / 1000;
      const [current, previous] = identity.keysAt(at);
      let prior: RemoteIntent | null = null;
      if (previous !== undefined && previous !== current) {
        try {
          prior = await client.get(previous);
        } catch (e) {
          if (!(e instanceof ApiError && e.status === 404)) {
            throw e;
          }
        }
      }
      const key = identity.keyFor(at, prior === null ? null : prior.createdAt.getTime() / 1000);
      await client.submit(key, { action, arguments: text });
      return outcome(await client.wait(key, timeoutMs));
    },
  };
}
