// Builds the addon: `cargo build` of this crate (in the workspace, its
// target directory shared), then the library copied to failover.node.
// usage: node build.mjs [--release]
import { spawnSync } from 'node:child_process';
import { copyFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const args = ['build', '-p', 'failover-node', '--message-format=json-render-diagnostics'];
if (process.argv.includes('--release')) args.push('--release');
const cargo = spawnSync(process.env.CARGO ?? 'cargo', args, {
  cwd: here,
  encoding: 'utf8',
  stdio: ['ignore', 'pipe', 'inherit'],
  maxBuffer: 64 << 20,
});
if (cargo.status !== 0) process.exit(cargo.status ?? 1);
// The cdylib cargo reports for this crate: .so, .dylib or .dll.
const lib = cargo.stdout
  .split('\n')
  .filter((l) => l.startsWith('{'))
  .map((l) => JSON.parse(l))
  .filter((m) => m.reason === 'compiler-artifact' && m.target?.name === 'failover_node')
  .flatMap((m) => m.filenames)
  .find((f) => /\.(so|dylib|dll)$/.test(f));
if (!lib) {
  console.error('build.mjs: cargo reported no library for failover_node');
  process.exit(1);
}
copyFileSync(lib, join(here, 'failover.node'));
console.error(`build.mjs: ${lib} -> failover.node`);
