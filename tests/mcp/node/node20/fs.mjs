// node:fs, and a globSync for Node.js 20 that fails loudly if the conformance suite ever calls it.
import fs from "node:fs";

export * from "node:fs";
export default fs;

export function globSync() {
  throw new Error("fs.globSync needs Node.js 22 or later");
}
