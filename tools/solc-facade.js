#!/usr/bin/env node
// Offline stand-in for a native `solc` binary, backed by the pinned solc-js
// (npm `solc`). It answers only the two calls py-solc-x, ape-solidity and
// forge make: `--version` and `--standard-json` (input on stdin). Imports are
// read from disk relative to --base-path / --include-path / the cwd, so no
// compile ever reaches the network.
"use strict";
const fs = require("fs");
const path = require("path");
const solc = require(path.join(__dirname, "..", "node_modules", "solc"));

const args = process.argv.slice(2);

function flagValues(name) {
  const values = [];
  args.forEach((arg, i) => {
    if (arg === name && i + 1 < args.length) values.push(args[i + 1]);
    else if (arg.startsWith(name + "=")) values.push(arg.slice(name.length + 1));
  });
  return values;
}

if (args.includes("--version")) {
  process.stdout.write("solc, the solidity compiler commandline interface\n");
  process.stdout.write(`Version: ${solc.version()}\n`);
  process.exit(0);
}

if (!args.includes("--standard-json")) {
  process.stderr.write(
    "solc facade: only --version and --standard-json are supported " +
      `(got: ${args.join(" ") || "no arguments"})\n`,
  );
  process.exit(2);
}

const roots = [...flagValues("--base-path"), ...flagValues("--include-path"), process.cwd()];
for (const allowed of flagValues("--allow-paths")) roots.push(...allowed.split(","));

function findImports(importPath) {
  const candidates = path.isAbsolute(importPath)
    ? [importPath]
    : roots.map((root) => path.resolve(root, importPath));
  for (const candidate of candidates) {
    if (fs.existsSync(candidate) && fs.statSync(candidate).isFile()) {
      return { contents: fs.readFileSync(candidate, "utf8") };
    }
  }
  return { error: `File not found: ${importPath} (searched ${roots.join(", ")})` };
}

const input = fs.readFileSync(0, "utf8");
process.stdout.write(solc.compile(input, { import: findImports }));
process.stdout.write("\n");
