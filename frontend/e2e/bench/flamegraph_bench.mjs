// Browser benchmark of Kiln's flamegraph UI on a graph of about a million
// nodes, in the same headless Chromium as the end-to-end tests:
//
// - time to first render (navigation to the first frame drawn), against
//   speedscope (npm package `speedscope`) loading the same profile as
//   collapsed stacks in the same browser;
// - render time per frame while zooming (wheel) and panning (drag): p50,
//   p95, max;
// - Flamewire bytes against the same graph as JSON: raw and gzip'd (here),
//   and as the browser received them (Resource Timing's encodedBodySize:
//   the body as sent, zstd for Flamewire, gzip for JSON as Chromium
//   negotiates them);
// - the time the UI takes to validate the Flamewire and derive its tree
//   (`load_ms`).
//
//   node bench/flamegraph_bench.mjs [--nodes 1000000] [--seed 7]
//
// Prints a table and writes test-output/browser/bench.json.
import { createReadStream, mkdirSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { createRequire } from 'node:module';
import { auth, importCollapsed, launchBrowser, outputDir, startKiln } from '../support.mjs';

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, a, i, all) => (a.startsWith('--') ? [...pairs, [a.slice(2), all[i + 1]]] : pairs), []),
);
const targetNodes = Number(args.nodes ?? 1_000_000);
const seed = Number(args.seed ?? 7);
const runs = Number(args.runs ?? 3);

/** Deterministic PRNG (mulberry32). */
function rng(s) {
  return () => {
    s |= 0; s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Collapsed stacks of random walks over a synthetic call graph (as
 * load-tests' flamewire_bench builds), until the merged tree has
 * `target` nodes. */
function generate(target) {
  const random = rng(seed);
  const functions = 50_000;
  const names = Array.from({ length: functions }, (_, i) => `mod${i % 200}::fn_${i}`);
  const callees = Array.from({ length: functions }, () =>
    Array.from({ length: 1 + Math.floor(random() * 8) }, () => Math.floor(random() * functions)));
  const trie = new Map();
  let nodes = 1;
  const lines = [];
  while (nodes < target) {
    const depth = 8 + Math.floor(random() * 57);
    let f = Math.floor(random() * 20);
    let at = 0;
    const stack = [];
    for (let d = 0; d < depth; d++) {
      stack.push(names[f]);
      const key = at * functions + f;
      let id = trie.get(key);
      if (id === undefined) { id = nodes++; trie.set(key, id); }
      at = id;
      const next = callees[f];
      f = next[Math.floor(random() * next.length)];
    }
    lines.push(`${stack.join(';')} ${1 + Math.floor(random() * 1000)}`);
  }
  return { text: lines.join('\n') + '\n', nodes, stacks: lines.length };
}

const percentile = (values, p) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
};
const median = (values) => percentile(values, 50);

/** Serves speedscope's built app and the profile file. */
function serveSpeedscope(profile) {
  const require = createRequire(import.meta.url);
  const root = join(require.resolve('speedscope/package.json'), '..', 'dist', 'release');
  const types = { html: 'text/html', js: 'text/javascript', css: 'text/css', wasm: 'application/wasm', json: 'application/json', png: 'image/png', woff2: 'font/woff2', ico: 'image/x-icon', txt: 'text/plain' };
  const server = http.createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    if (path === '/profile.folded') {
      res.writeHead(200, { 'content-type': 'text/plain', 'access-control-allow-origin': '*' });
      res.end(profile);
      return;
    }
    const file = join(root, path === '/' ? 'index.html' : path.replace(/^\/+/, ''));
    if (!file.startsWith(root)) { res.writeHead(404); res.end(); return; }
    const stream = createReadStream(file);
    stream.on('error', () => { res.writeHead(404); res.end(); });
    stream.on('open', () => {
      res.writeHead(200, { 'content-type': types[file.split('.').pop()] ?? 'application/octet-stream' });
      stream.pipe(res);
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

/** Milliseconds from navigation start until `ready()` is true in the page
 * (polled every animation frame), and from the end of the download of the
 * resource whose URL contains `data` (the profile) until then. */
async function timeToReady(page, url, ready, arg, data) {
  await page.goto('about:blank');
  await page.goto(url, { waitUntil: 'commit' });
  const handle = await page.waitForFunction(ready, arg, { polling: 'raf', timeout: 180_000 });
  await handle.dispose();
  return page.evaluate((part) => {
    const now = performance.now();
    const entry = performance.getEntriesByType('resource').find((e) => e.name.includes(part));
    return { total: now, after_data: entry ? now - entry.responseEnd : null };
  }, data);
}

async function main() {
  console.log(`generating a graph of ${targetNodes} nodes…`);
  const profile = generate(targetNodes);
  console.log(`  ${profile.stacks} stacks, ${(profile.text.length / 1e6).toFixed(1)} MB collapsed, ${profile.nodes} nodes`);

  const kiln = await startKiln();
  const browser = await launchBrowser(kiln);
  const speedscope = await serveSpeedscope(profile.text);
  const report = { nodes: profile.nodes, stacks: profile.stacks, collapsed_bytes: profile.text.length };
  try {
    let started = Date.now();
    await importCollapsed(kiln.url, profile.text);
    report.import_ms = Date.now() - started;

    // Bytes on the wire: Flamewire against JSON of the same graph.
    const body = async (format, encoding) => {
      const r = await fetch(`${kiln.url}/api/v1/flamegraph?format=${format}`, { headers: { 'accept-encoding': encoding, ...auth(kiln.url) } });
      return Buffer.from(await r.arrayBuffer());
    };
    started = Date.now();
    const wire = await body('flamewire', 'identity');
    report.server_query_cold_ms = Date.now() - started;
    const json = await body('json', 'identity');
    report.flamewire_bytes = wire.length;
    report.json_bytes = json.length;
    report.flamewire_gzip_bytes = gzipSync(wire).length;
    report.json_gzip_bytes = gzipSync(json).length;
    report.json_over_flamewire = json.length / wire.length;
    report.json_gzip_over_flamewire_gzip = report.json_gzip_bytes / report.flamewire_gzip_bytes;

    const page = await browser.context.newPage();
    // Time to first render, best of `runs` (the server's query is cached
    // after the first).
    const kilnTimes = [];
    for (let i = 0; i < runs; i++) {
      kilnTimes.push(await timeToReady(page, `${kiln.url}/`, (n) => window.__kiln_stats?.node_count === n && window.__kiln_stats.frames > 0, profile.nodes, 'format=flamewire'));
    }
    report.kiln_first_render_ms = kilnTimes.map((t) => t.total);
    report.kiln_first_render_after_data_ms = kilnTimes.map((t) => t.after_data);
    const stats = await page.evaluate(() => ({ ...window.__kiln_stats, find: undefined }));
    report.first_frame = { nodes_drawn: stats.nodes_drawn, nodes_skipped: stats.nodes_skipped, nodes_visited: stats.nodes_visited, frame_ms: stats.frame_ms };
    report.kiln_load_ms = stats.load_ms;

    // Bytes as the browser received them: the graph the page shows, fetched
    // again as Flamewire and as JSON, uncached, with the browser's own
    // Accept-Encoding.
    report.browser = await page.evaluate(async () => {
      const shown = performance.getEntriesByType('resource').find((e) => e.name.includes('format=flamewire'));
      const sizes = async (url) => {
        const response = await fetch(url, { cache: 'no-store' });
        await response.arrayBuffer();
        const entry = performance.getEntriesByType('resource').filter((e) => e.name === response.url).pop();
        return { content_encoding: response.headers.get('content-encoding'), sent_bytes: entry.encodedBodySize, bytes: entry.decodedBodySize };
      };
      return { flamewire: await sizes(shown.name), json: await sizes(shown.name.replace('format=flamewire', 'format=json')) };
    });
    const { flamewire: sentWire, json: sentJson } = report.browser;
    report.browser_json_over_flamewire_as_sent = sentJson.bytes / sentWire.sent_bytes;
    report.browser_json_as_sent_over_flamewire_as_sent = sentJson.sent_bytes / sentWire.sent_bytes;
    report.browser_json_over_flamewire_raw = sentJson.bytes / sentWire.bytes;

    // Frames while zooming and panning: synthetic wheel and drag events on
    // the canvas; each is handled (laid out and drawn) synchronously.
    report.interaction = await page.evaluate(async () => {
      const canvas = document.querySelector('.flame-canvas');
      const r = canvas.getBoundingClientRect();
      const frameMs = [];
      const handlerMs = [];
      let seedValue = 1;
      const random = () => { seedValue = (seedValue * 16807) % 2147483647; return seedValue / 2147483647; };
      const at = (x, y) => ({ clientX: r.left + x, clientY: r.top + y, bubbles: true });
      const record = (fire) => {
        const before = window.__kiln_stats.frames;
        const t = performance.now();
        fire();
        handlerMs.push(performance.now() - t);
        if (window.__kiln_stats.frames > before) frameMs.push(window.__kiln_stats.frame_ms);
      };
      for (let i = 0; i < 300; i++) {
        const x = r.width * (0.1 + 0.8 * random());
        const y = r.height * (0.2 + 0.7 * random());
        if (i % 3 === 2) {
          record(() => canvas.dispatchEvent(new WheelEvent('wheel', { ...at(x, y), deltaY: i % 30 < 15 ? -240 : 240, cancelable: true })));
        } else {
          canvas.dispatchEvent(new MouseEvent('mousedown', { ...at(x, y), buttons: 1 }));
          for (let s = 1; s <= 4; s++) {
            record(() => canvas.dispatchEvent(new MouseEvent('mousemove', { ...at(x + s * 30 * (random() - 0.5), y + s * 8 * (random() - 0.5)), buttons: 1 })));
          }
          canvas.dispatchEvent(new MouseEvent('mouseup', at(x, y)));
        }
        if (i % 20 === 19) await new Promise((done) => requestAnimationFrame(done));
      }
      return { frameMs, handlerMs };
    });
    const { frameMs, handlerMs } = report.interaction;
    report.frames = frameMs.length;
    report.frame_ms = { p50: median(frameMs), p95: percentile(frameMs, 95), max: Math.max(...frameMs) };
    report.handler_ms = { p50: median(handlerMs), p95: percentile(handlerMs, 95), max: Math.max(...handlerMs) };
    delete report.interaction;

    // speedscope on the same stacks, same browser: until its flame chart
    // has drawn (a canvas with a size and the file's name in the title).
    const port = speedscope.address().port;
    const speedscopeUrl = `http://127.0.0.1:${port}/index.html#profileURL=${encodeURIComponent(`http://127.0.0.1:${port}/profile.folded`)}`;
    const speedscopeTimes = [];
    for (let i = 0; i < runs; i++) {
      speedscopeTimes.push(await timeToReady(page, speedscopeUrl, () => {
        const canvases = [...document.querySelectorAll('canvas')].filter((c) => c.width > 0 && c.height > 0);
        return canvases.length > 0 && document.title.includes('profile.folded');
      }, null, 'profile.folded'));
    }
    report.speedscope_first_render_ms = speedscopeTimes.map((t) => t.total);
    report.speedscope_first_render_after_data_ms = speedscopeTimes.map((t) => t.after_data);
    const best = (times, key) => Math.min(...times.map((t) => t[key]));
    report.speedscope_over_kiln_first_render = best(speedscopeTimes, 'total') / best(kilnTimes, 'total');
    report.speedscope_over_kiln_after_data = best(speedscopeTimes, 'after_data') / best(kilnTimes, 'after_data');
    await page.screenshot({ path: join(outputDir, 'bench-speedscope.png') });
    await page.goto(`${kiln.url}/`);
    await page.waitForFunction(() => window.__kiln_stats?.frames > 0, null, { timeout: 300_000 });
    await page.screenshot({ path: join(outputDir, 'bench-kiln.png') });
  } finally {
    speedscope.close();
    await browser.close();
    await kiln.stop();
  }
  mkdirSync(outputDir, { recursive: true });
  writeFileSync(join(outputDir, 'bench.json'), JSON.stringify(report, null, 2));
  console.log(JSON.stringify(report, null, 2));
}

await main();
