-- The `mcp` destination kind: an MCP server that refuses a call, or a tool whose result says
-- isError, fails the attempt for good with its own code (oncebox_core::ErrorCode::ToolError).
ALTER TYPE oncebox.error_code ADD VALUE 'tool_error';
