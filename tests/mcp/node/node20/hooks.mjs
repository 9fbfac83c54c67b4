// Resolves the conformance suite's "fs" to fs.mjs: node:fs plus a globSync that says it is missing.
const SHIM = new URL("./fs.mjs", import.meta.url).href;

export async function resolve(specifier, context, nextResolve) {
  const parent = context.parentURL ?? "";
  const isFs = specifier === "fs" || specifier === "node:fs";
  if (isFs && parent !== SHIM && parent.includes("/@modelcontextprotocol/conformance/")) {
    return { url: SHIM, shortCircuit: true };
  }
  return nextResolve(specifier, context);
}
