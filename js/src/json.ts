import { InvalidIntent } from "./errors.js";

/** A JSON document as JavaScript holds it. `bigint` is written as the integer it is. */
export type Json =
  | null
  | boolean
  | number
  | bigint
  | string
  | readonly Json[]
  | { readonly [key: string]: Json | undefined };

/**
 * The JSON text of `value`, the `field` of an intent. Unlike `JSON.stringify`, it refuses what
 * JSON cannot hold instead of writing `null` or nothing (NaN, Infinity, `undefined` in an array,
 * functions, symbols, cycles), naming the place (`arguments/items/2`), and writes a `bigint` as
 * its digits, so that the Rust rules see — and refuse beyond ±2^53 — the integer itself. A string
 * is taken as JSON text already (read in Rust, never by `JSON.parse`, which would round).
 */
export function jsonText(value: Json | string, field: string): string {
  if (typeof value === "string") {
    return value;
  }
  const out: string[] = [];
  write(value, field, out, new Set());
  return out.join("");
}

function write(value: unknown, at: string, out: string[], open: Set<object>): void {
  switch (typeof value) {
    case "string":
      out.push(JSON.stringify(value));
      return;
    case "boolean":
      out.push(value ? "true" : "false");
      return;
    case "number":
      if (!Number.isFinite(value)) {
        throw new InvalidIntent(at, `${String(value)} is not a JSON number`);
      }
      out.push(JSON.stringify(value));
      return;
    case "bigint":
      out.push(value.toString());
      return;
    case "object":
      if (value === null) {
        out.push("null");
        return;
      }
      writeObject(value, at, out, open);
      return;
    default:
      throw new InvalidIntent(at, `a ${typeof value} is not JSON`);
  }
}

function writeObject(value: object, at: string, out: string[], open: Set<object>): void {
  if (open.has(value)) {
    throw new InvalidIntent(at, "refers to itself: JSON cannot hold a cycle");
  }
  const toJSON = (value as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === "function") {
    write((toJSON as () => unknown).call(value), at, out, open);
    return;
  }
  open.add(value);
  if (Array.isArray(value)) {
    out.push("[");
    value.forEach((item: unknown, i) => {
      if (i > 0) {
        out.push(",");
      }
      write(item, `${at}/${String(i)}`, out, open);
    });
    out.push("]");
  } else {
    out.push("{");
    let first = true;
    for (const [k, item] of Object.entries(value)) {
      if (item === undefined) {
        continue;
      }
      out.push(first ? "" : ",", JSON.stringify(k), ":");
      first = false;
      write(item, `${at}/${k.replaceAll("~", "~0").replaceAll("/", "~1")}`, out, open);
    }
    out.push("}");
  }
  open.delete(value);
}
