// Shared by the end-to-end tests and the benchmark: a `kiln up` child
// process with its data in a temporary directory, and headless Chromium.
import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** Where screenshots go (CI keeps this directory). */
export const outputDir = join(repoRoot, 'test-output', 'browser');

/** The kiln binary: $KILN_BIN, else the workspace's debug build. */
export function kilnBin() {
  if (process.env.KILN_BIN) return process.env.KILN_BIN;
  const target = resolve(repoRoot, process.env.CARGO_TARGET_DIR ?? 'target');
  return join(target, 'debug', 'kiln');
}

/** The API key of each server started here, by URL (`kiln up` keeps its
 * own in DATA_DIR/api-key). */
const keys = new Map();

/** Starts `kiln up` on a free port serving the built UI; resolves once it
 * prints its address and its one-time login link. */
export async function startKiln() {
  const dataDir = mkdtempSync(join(tmpdir(), 'kiln-e2e-'));
  const child = spawn(kilnBin(), [
    'up', '--no-agent', '--listen', '127.0.0.1:0', '--data-dir', dataDir,
    '--ui-dir', join(repoRoot, 'frontend', 'dist'),
  ], { env: { ...process.env, KILN_LOG: 'warn' }, stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout });
  let url;
  const login = await new Promise((resolveLogin, reject) => {
    child.once('exit', (code) => reject(new Error(`kiln up exited (${code}) before printing its URL`)));
    lines.on('line', (line) => {
      const m = line.match(/^Kiln is up: (http:\/\/\S+?)\/?$/);
      if (m) url = m[1];
      const l = line.match(/^\s+login:\s+(\S+)$/);
      if (l) resolveLogin(l[1]);
    });
  });
  keys.set(url, readFileSync(join(dataDir, 'api-key'), 'utf8').trim());
  return {
    url,
    login,
    async stop() {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGINT');
      await exited;
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Headers that authenticate a request of Node's own to the server at
 * `url` (the browser has its session cookie). */
export function auth(url) {
  return { authorization: `Bearer ${keys.get(url)}` };
}

/** Imports collapsed stacks into the server; resolves once they are queryable. */
export async function importCollapsed(url, text, labels = {}) {
  const params = new URLSearchParams({ format: 'collapsed', ...labels });
  const response = await fetch(`${url}/api/v1/import?${params}`, {
    method: 'POST', body: text, headers: { authorization: `Bearer ${keys.get(url)}` },
  });
  const body = await response.json();
  if (!response.ok || !body.queryable) {
    throw new Error(`import failed: ${response.status} ${JSON.stringify(body)}`);
  }
  return body;
}

/** Posts an encoded agent batch (what `kiln-agent` sends) to the server;
 * resolves once it is durable (not yet queryable). */
export async function postBatch(url, bytes) {
  const response = await fetch(`${url}/api/v1/ingest`, {
    method: 'POST', body: bytes, headers: { authorization: `Bearer ${keys.get(url)}` },
  });
  const body = await response.json();
  if (!response.ok) throw new Error(`ingest failed: ${response.status} ${JSON.stringify(body)}`);
  return body;
}

/** Headless Debian Chromium with a fresh profile directory, logged in to
 * `kiln` (from startKiln) through its one-time login link. */
export async function launchBrowser(kiln) {
  const profile = mkdtempSync(join(tmpdir(), 'kiln-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1400, height: 900 },
    acceptDownloads: true,
    args: [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
    ],
  });
  if (kiln) {
    const page = await context.newPage();
    await page.goto(kiln.login);
    await page.close();
  }
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Saves a screenshot of `page` as test-output/browser/NAME.png. */
export async function screenshot(page, name) {
  mkdirSync(outputDir, { recursive: true });
  await page.screenshot({ path: join(outputDir, `${name}.png`) });
}
