// oncebox for TypeScript: in-transaction submit for node-postgres on the same Rust core as the
// Rust library and the Python package.
export { Intake, type IntakeOptions, type NewIntent, type Prepared, principalOf } from "./intake.js";
export { type Json, jsonText } from "./json.js";
export {
  type CallIdentityOptions,
  businessKey,
  callIdentity,
  canonicalJson,
  deliveryKey,
  requestHash,
  stepKey,
  validateKey,
} from "./keys.js";
export { type Intent, SETTLED, STATUSES, type Status, type Submitted, TERMINAL, WAITING_FOR_A_PERSON } from "./model.js";
export { FACTS, type Facts } from "./native.js";
export { type DrizzleExecutor, type Queryable, type SubmitOptions, submit } from "./submit.js";
export {
  ApiError,
  Client,
  type RemoteIntent,
  type RetryOptions,
  type SubmitRequest,
  TransportError,
} from "./client.js";
export {
  AwaitingApproval,
  ConfigError,
  FieldError,
  IntentCancelled,
  IntentFailed,
  InvalidIntent,
  KeyConflict,
  NeedsReview,
  NotSucceeded,
  OnceboxError,
  Rejected,
  WaitTimeout,
} from "./errors.js";
export { type ToolContext, type ToolOptions, onceboxTool, outcome } from "./tool.js";
