// Builds the native addon with cargo alone (no @napi-rs/cli): `cargo build
// -p sandboxd-node`, then copies the cdylib to `sandboxd.node`, the name
// Node loads an addon by. `--release` builds the optimised one.
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const packageDir = path.resolve(here, "..");
const workspace = path.resolve(packageDir, "..", "..");
const release = process.argv.includes("--release");

const args = ["build", "-p", "sandboxd-node"];
if (release) args.push("--release");
execFileSync(process.env.CARGO ?? "cargo", args, { cwd: workspace, stdio: "inherit" });

const targetDir = process.env.CARGO_TARGET_DIR ?? path.join(workspace, "target");
const built = path.join(targetDir, release ? "release" : "debug", "libsandboxd_node.so");
if (!existsSync(built)) {
  throw new Error(`cargo finished but ${built} is not there`);
}
copyFileSync(built, path.join(packageDir, "sandboxd.node"));
console.log(`sandboxd.node <- ${built}`);
