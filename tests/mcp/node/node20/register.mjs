// Lets @modelcontextprotocol/conformance 0.1.16 start on Node.js 20: it imports fs.globSync,
// which Node.js added in 22. Loaded with `node --import`; on Node.js 22 or later it does nothing.
import { register } from "node:module";

const [major] = process.versions.node.split(".").map(Number);
if (major < 22) {
  register("./hooks.mjs", import.meta.url);
}
