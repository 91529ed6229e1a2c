// Loads the native addon (the Rust client library, bound with napi-rs).
// SANDBOXD_NODE_ADDON names it explicitly (the Rust test that runs this
// package's tests points it at the cdylib cargo built); otherwise it is
// `sandboxd.node` beside index.js, which `npm run build` puts there.
import { createRequire } from "node:module";
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);
const packageDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

function addonPath() {
  const explicit = process.env.SANDBOXD_NODE_ADDON;
  if (explicit !== undefined && explicit !== "") return explicit;
  return path.join(packageDir, "sandboxd.node");
}

let loaded;

/** The addon's exports, loaded on first use (so importing the package never fails by itself). */
export function native() {
  if (loaded === undefined) {
    const file = addonPath();
    if (!existsSync(file)) {
      throw new Error(
        `the sandboxd native addon is missing at ${file}: run \`npm run build\` in clients/node ` +
          "(or set SANDBOXD_NODE_ADDON to the built libsandboxd_node.so)",
      );
    }
    // Node picks the addon loader by the .node extension; a .so path
    // (SANDBOXD_NODE_ADDON) goes through process.dlopen directly.
    if (file.endsWith(".node")) {
      loaded = require(file);
    } else {
      const module = { exports: {} };
      process.dlopen(module, file);
      loaded = module.exports;
    }
  }
  return loaded;
}
