// The same idempotent tool in the Vercel AI SDK and in the OpenAI Agents SDK: each model tool
// call submits an intent whose key is the order it invoices, so a call the agent retries — after
// a lost answer, a timeout or a crash — finds the same intent and invoices once.
import { tool as openaiTool } from "@openai/agents";
import { tool as aiTool } from "ai";
import { z } from "zod";

import { Client, onceboxTool } from "oncebox";

const oncebox = new Client(process.env.ONCEBOX_URL ?? "http://127.0.0.1:8080", process.env.ONCEBOX_TOKEN ?? "");
const invoice = onceboxTool("create_invoice", { via: oncebox, key: ["/order_id"] });
const input = z.object({ order_id: z.string(), amount: z.string() });

// Vercel AI SDK: pass it to generateText({ tools: { createInvoice } }).
export const createInvoice = aiTool({
  description: "Invoice an order, once",
  inputSchema: input,
  execute: async (args) => (await invoice.execute(args)).response,
});

// OpenAI Agents SDK: new Agent({ tools: [createInvoiceTool] }).
export const createInvoiceTool = openaiTool({
  name: "create_invoice",
  description: "Invoice an order, once",
  parameters: input,
  execute: async (args) => JSON.stringify((await invoice.execute(args)).response),
});
