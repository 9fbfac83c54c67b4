// A scripted MCP session with the TypeScript SDK's Client, for tests/mcp/test_node_clients.py.
//
//   node client.mjs '<plan as JSON>'
//
// The plan: {"server": {"url": "http://127.0.0.1:<port>/mcp"} or {"command": ..., "args": [...],
// "env": {...}}, "steps": [...]}. A step is {"list": true} or {"tool": name, "args": {...},
// "key": "<idempotency key, sent in _meta>"}. The session always lists the tools first, so the
// SDK knows each tool's outputSchema and checks every structuredContent against it on callTool
// (a result that does not match throws, as it would in any agent host built on this SDK).
// Prints one JSON array on stdout: per step {"tools": [...]}, {"result": {...}} or
// {"error": {"code": ..., "message": ...}}.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const KEY_META = "io.call4agents/idempotency-key";

function transportFor(server) {
  if (server.url) {
    return new StreamableHTTPClientTransport(new URL(server.url));
  }
  return new StdioClientTransport({
    command: server.command,
    args: server.args ?? [],
    env: { ...process.env, ...(server.env ?? {}) },
    cwd: server.cwd,
    stderr: "inherit",
  });
}

async function step(client, what) {
  if (what.list) {
    const { tools } = await client.listTools();
    return { tools };
  }
  const params = { name: what.tool, arguments: what.args ?? {} };
  if (what.key) {
    params._meta = { [KEY_META]: what.key };
  }
  try {
    return { result: await client.callTool(params) };
  } catch (error) {
    return { error: { code: error.code ?? null, message: String(error.message ?? error) } };
  }
}

const plan = JSON.parse(process.argv[2]);
const client = new Client({ name: "call4agents-node-test", version: "0.0.0" });
await client.connect(transportFor(plan.server));
const out = [];
await client.listTools(); // the outputSchemas the SDK validates results against
for (const what of plan.steps) {
  out.push(await step(client, what));
}
await client.close();
process.stdout.write(JSON.stringify(out) + "\n");
