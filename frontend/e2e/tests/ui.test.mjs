// End-to-end tests of Kiln's web UI in headless Chromium: a real `kiln up`,
// a known imported profile, and the page driven as a user would.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  auth, importCollapsed, launchBrowser, postBatch, repoRoot, screenshot, startKiln,
} from '../support.mjs';

// 100 samples; node names are unique so the tests can find each frame.
const BEFORE = [
  'main;parse;lex 30',
  'main;parse;alloc 10',
  'main;render;draw 40',
  'main;render 5',
  'main;idle 15',
].join('\n');

// Imported later, for the diff: draw grows from 40 % to 85 %, lex shrinks
// from 30 % to 5 %, and idle (15 %) is gone.
const AFTER = [
  'main;parse;lex 5',
  'main;parse;alloc 5',
  'main;render;draw 85',
  'main;render 5',
].join('\n');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let kiln;
let browser;
let page;
// Unix seconds: before the first import, between the imports, after both.
let t0;
let tMid;
// Uncaught errors of the page (a Rust panic shows up here).
const pageErrors = [];

/** The main flamegraph's render statistics. */
const stats = () => page.evaluate(() => {
  const s = window.__kiln_stats;
  return s && { ...s, find: undefined };
});

/** Box of the first drawn node named `name`, in page coordinates. */
async function boxOf(name, key = '__kiln_stats') {
  const box = await page.evaluate(([n, k]) => window[k]?.find(n), [name, key]);
  if (!box) return null;
  const canvas = page.locator(key === '__kiln_stats' ? '.flame-canvas' : '.sandwich .flame-canvas').first();
  const origin = await canvas.boundingBox();
  return { x: origin.x + box.x, y: origin.y + box.y, w: box.w, h: box.h };
}

/** Waits until the main graph has `total` samples drawn. */
async function waitForGraph(total) {
  await page.waitForFunction((t) => window.__kiln_stats?.root_total === t && window.__kiln_stats.frames > 0, total);
}

/** Waits until CPU over time has drawn: until then its time range is not
 * known and a drag across it picks nothing (the timeline query can answer
 * after the flamegraph's). */
async function waitForTimeline() {
  await page.waitForFunction(() => document.querySelector('.timeline-area')?.getAttribute('d')?.startsWith('M'));
}

/** The canvas pixel (RGB) at the centre of node `name`. */
async function pixelOf(name) {
  const box = await page.evaluate((n) => window.__kiln_stats.find(n), name);
  return page.evaluate(({ x, y }) => {
    const canvas = document.querySelector('.flame-canvas');
    const dpr = window.devicePixelRatio;
    const d = canvas.getContext('2d').getImageData(Math.round(x * dpr), Math.round(y * dpr), 1, 1).data;
    return [d[0], d[1], d[2]];
  }, { x: box.x + 2, y: box.y + box.h / 2 });
}

before(async () => {
  kiln = await startKiln();
  t0 = Date.now() / 1000 - 1;
  await importCollapsed(kiln.url, BEFORE, { process: 'app' });
  await sleep(1500);
  tMid = Date.now() / 1000;
  await sleep(1500);
  browser = await launchBrowser(kiln);
  page = await browser.context.newPage();
  page.on('pageerror', (e) => pageErrors.push(String(e)));
});

after(async () => {
  await browser?.close();
  await kiln?.stop();
  assert.deepEqual(pageErrors, [], 'the page threw no errors');
});

describe('the flamegraph', () => {
  test('draws every frame of the imported profile on a canvas sized to the screen', async () => {
    await page.goto(`${kiln.url}/`);
    await waitForGraph(100);
    const s = await stats();
    // all, main, parse, lex, alloc, render, draw, idle.
    assert.equal(s.node_count, 8);
    assert.equal(s.nodes_drawn, 8);
    assert.equal(s.nodes_skipped, 0);
    const css = await page.locator('.flame-canvas').boundingBox();
    assert.equal(s.canvas_width, Math.round(css.width * s.device_pixel_ratio));
    assert.equal(s.canvas_height, Math.round(css.height * s.device_pixel_ratio));
    for (const name of ['main', 'parse', 'lex', 'alloc', 'render', 'draw', 'idle']) {
      assert.ok(await boxOf(name), `${name} is drawn`);
    }
    // Widths follow the counts: draw (40) is 4/3 of lex (30).
    const lex = await boxOf('lex');
    const draw = await boxOf('draw');
    assert.ok(Math.abs(draw.w / lex.w - 40 / 30) < 0.02, `draw ${draw.w} px, lex ${lex.w} px`);
    await screenshot(page, 'flamegraph');
  });

  test('hovering a frame shows its self and total share', async () => {
    const lex = await boxOf('lex');
    await page.mouse.move(lex.x + lex.w / 2, lex.y + lex.h / 2);
    const tooltip = page.locator('.tooltip');
    await tooltip.waitFor();
    assert.equal(await tooltip.locator('.tooltip-name').textContent(), 'lex');
    const figures = await tooltip.locator('.tooltip-figures').textContent();
    assert.match(figures, /self [\d.em-]+ cores \(30\.00%\) · total [\d.em-]+ cores \(30\.00%\)/);
    const parse = await boxOf('parse');
    await page.mouse.move(parse.x + parse.w / 2, parse.y + parse.h / 2);
    await page.waitForFunction(() => document.querySelector('.tooltip-name')?.textContent === 'parse');
    assert.match(await tooltip.locator('.tooltip-figures').textContent(), /\(0\.00%\) · total [\d.em-]+ cores \(40\.00%\)/);
    await screenshot(page, 'tooltip');
  });

  test('a click focuses a frame, the URL keeps it, and r resets the zoom', async () => {
    const parse = await boxOf('parse');
    await page.mouse.click(parse.x + parse.w / 2, parse.y + parse.h / 2);
    await page.waitForFunction(() => window.__kiln_stats.x1 - window.__kiln_stats.x0 === 40);
    assert.match(page.url(), /focus=main%3Bparse/);
    const s = await stats();
    assert.equal(await boxOf('render'), null, 'render is off the zoomed view');
    assert.ok(s.nodes_skipped >= 3, `render and idle subtrees skipped (${s.nodes_skipped})`);
    const zoomed = await boxOf('lex');
    const canvas = await page.locator('.flame-canvas').boundingBox();
    assert.ok(Math.abs(zoomed.w - canvas.width * 0.75) < 2, 'lex spans 30/40 of the width');
    await screenshot(page, 'focused');
    // Reloading the link shows the same focus.
    await page.reload();
    await waitForGraph(100);
    await page.waitForFunction(() => window.__kiln_stats.x1 - window.__kiln_stats.x0 === 40);
    await page.keyboard.press('r');
    await page.waitForFunction(() => window.__kiln_stats.x1 - window.__kiln_stats.x0 === 100);
    assert.doesNotMatch(page.url(), /focus=/);
  });

  test('the wheel zooms and a drag pans', async () => {
    const canvas = await page.locator('.flame-canvas').boundingBox();
    await page.mouse.move(canvas.x + canvas.width / 2, canvas.y + canvas.height - 5);
    await page.mouse.wheel(0, -400);
    await page.waitForFunction(() => window.__kiln_stats.x1 - window.__kiln_stats.x0 < 60);
    const zoomed = await stats();
    await page.mouse.down();
    await page.mouse.move(canvas.x + canvas.width / 2 + 200, canvas.y + canvas.height - 5, { steps: 5 });
    await page.mouse.up();
    const panned = await stats();
    assert.ok(panned.x0 < zoomed.x0, `dragging right shows what is left (${zoomed.x0} → ${panned.x0})`);
    assert.ok(Math.abs((panned.x1 - panned.x0) - (zoomed.x1 - zoomed.x0)) < 1e-6);
    await page.keyboard.press('r');
    await page.waitForFunction(() => window.__kiln_stats.x1 - window.__kiln_stats.x0 === 100);
  });

  test('zoom and pan go to the URL, and the link shows the same view', async () => {
    const canvas = await page.locator('.flame-canvas').boundingBox();
    await page.mouse.move(canvas.x + canvas.width * 0.3, canvas.y + canvas.height - 5);
    await page.mouse.wheel(0, -500);
    await page.waitForFunction(() => window.__kiln_stats.x1 - window.__kiln_stats.x0 < 50);
    // A vertical drag scrolls two rows deeper (rows are 18 px).
    await page.mouse.move(canvas.x + canvas.width * 0.3, canvas.y + canvas.height / 2);
    await page.mouse.down();
    await page.mouse.move(canvas.x + canvas.width * 0.3, canvas.y + canvas.height / 2 + 36, { steps: 4 });
    await page.mouse.up();
    await page.waitForFunction(() => window.__kiln_stats.first_row === 2);
    // The URL follows once the pointer is quiet.
    await page.waitForFunction(() => (new URL(location).searchParams.get('view') ?? '').split(',').length === 3);
    const shown = await stats();
    const link = page.url();
    const [x0, x1, row] = new URL(link).searchParams.get('view').split(',').map(Number);
    assert.ok(Math.abs(x0 * 100 - shown.x0) < 1e-6 && Math.abs(x1 * 100 - shown.x1) < 1e-6,
      `view=${x0},${x1} is ${shown.x0}..${shown.x1} of 100 samples`);
    assert.equal(row, 2);
    // Opening the link gives the same view, drawing the same nodes.
    await page.goto('about:blank');
    await page.goto(link);
    await waitForGraph(100);
    const again = await stats();
    assert.ok(Math.abs(again.x0 - shown.x0) < 1e-6 && Math.abs(again.x1 - shown.x1) < 1e-6,
      `${again.x0}..${again.x1} after the reload, ${shown.x0}..${shown.x1} before`);
    assert.equal(again.first_row, 2);
    assert.equal(again.nodes_drawn, shown.nodes_drawn);
    assert.equal(again.nodes_skipped, shown.nodes_skipped);
    // r shows the whole graph again, and the link forgets the view.
    await page.keyboard.press('r');
    await page.waitForFunction(() => window.__kiln_stats.x1 - window.__kiln_stats.x0 === 100 && window.__kiln_stats.first_row === 0);
    await page.waitForFunction(() => !new URL(location).searchParams.get('view'));
  });

  test('f flips to an icicle graph and back', async () => {
    const flame = await boxOf('main');
    await page.keyboard.press('f');
    await page.waitForFunction(() => new URL(location).searchParams.get('icicle') === '1');
    const icicle = await boxOf('main');
    assert.ok(icicle.y < flame.y, 'the root rows move to the top');
    await page.keyboard.press('f');
  });
});

describe('views', () => {
  test('search highlights matches and reports their share', async () => {
    await page.keyboard.press('/');
    await page.keyboard.type('lex|alloc');
    await page.waitForFunction(() => document.querySelector('.summary')?.textContent.includes('search matches 40.00%'));
    assert.match(page.url(), /search=lex%7Calloc/);
    const [r, g, b] = await pixelOf('lex');
    assert.ok(r > 200 && g < 90 && b > 170, `lex is highlighted (${r},${g},${b})`);
    await screenshot(page, 'search');
    await page.keyboard.press('Escape');
    await page.waitForFunction(() => !document.querySelector('.summary').textContent.includes('search'));
  });

  test('the top table sorts and opens the sandwich of a function', async () => {
    const names = () => page.locator('.top-row .fn-name').allTextContents();
    await page.waitForFunction(() => document.querySelectorAll('.top-row').length === 7);
    // By self time, most first: draw 40, lex 30, idle 15, alloc 10, render 5.
    assert.deepEqual((await names()).slice(0, 5), ['draw', 'lex', 'idle', 'alloc', 'render']);
    await page.click('th[data-sort=function]');
    assert.deepEqual((await names()).slice(0, 3), ['alloc', 'draw', 'idle']);
    await page.click('th[data-sort=total]');
    assert.equal((await names())[0], 'main');
    await page.locator('.top-row', { hasText: 'parse' }).click();
    await page.locator('.sandwich').waitFor();
    assert.equal(await page.locator('.sandwich-name').textContent(), 'parse');
    assert.equal(await page.locator('.sandwich-figures').textContent(), 'total 40 samples · self 0 samples');
    await page.waitForFunction(() => window.__kiln_callees_stats?.root_total === 40 && window.__kiln_callers_stats?.root_total === 40);
    const callees = await page.evaluate(() => ({ ...window.__kiln_callees_stats }));
    const callers = await page.evaluate(() => ({ ...window.__kiln_callers_stats }));
    assert.equal(callees.nodes_drawn, 4, 'all, parse, lex, alloc');
    assert.equal(callers.nodes_drawn, 3, 'all, parse, main');
    assert.ok(await page.evaluate(() => window.__kiln_callees_stats.find('lex')));
    assert.ok(await page.evaluate(() => window.__kiln_callers_stats.find('main')));
    assert.match(page.url(), /fn=parse/);
    await screenshot(page, 'sandwich');
    await page.click('.close-sandwich');
    await page.keyboard.press('Escape');
  });

  test('brushing the timeline sets the time range', async () => {
    await waitForTimeline();
    const box = await page.locator('.timeline-box').boundingBox();
    // The samples are a few seconds old: the left 90 % of the last hour
    // holds none of them.
    await page.mouse.move(box.x + 2, box.y + box.height / 2);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width * 0.9, box.y + box.height / 2, { steps: 4 });
    await page.mouse.up();
    await page.locator('.empty-state').waitFor();
    assert.match(await page.locator('.empty-state').textContent(), /No samples in this range.*kiln import/);
    const from = Number(new URL(page.url()).searchParams.get('from'));
    assert.ok(Math.abs(from - (Date.now() / 1000 - 3600)) < 120, `from is about an hour ago (${from})`);
    await screenshot(page, 'empty-range');
    // The right end of the chart holds them all.
    await page.goto(`${kiln.url}/?from=now-10m`);
    await waitForGraph(100);
    await waitForTimeline();
    const wide = await page.locator('.timeline-box').boundingBox();
    await page.mouse.move(wide.x + wide.width * 0.5, wide.y + wide.height / 2);
    await page.mouse.down();
    await page.mouse.move(wide.x + wide.width - 1, wide.y + wide.height / 2, { steps: 4 });
    await page.mouse.up();
    await page.waitForFunction(() => /^\d+\.\d+$/.test(new URL(location).searchParams.get('from') ?? ''));
    await waitForGraph(100);
  });

  test('label filters narrow the query', async () => {
    await page.goto(`${kiln.url}/`);
    await waitForGraph(100);
    await page.selectOption('select[data-label=process]', 'app');
    await page.waitForFunction(() => new URL(location).searchParams.get('label.process') === 'app');
    await waitForGraph(100);
    await page.goto(`${kiln.url}/?label.process=nothing`);
    await page.locator('.empty-state').waitFor();
  });

  test('diff of two ranges colours growth red and shrink blue, noise muted', async () => {
    await importCollapsed(kiln.url, AFTER, { process: 'app' });
    const now = Date.now() / 1000 + 60;
    await page.goto(`${kiln.url}/?from=${tMid}&to=${now}&base_from=${t0}&base_to=${tMid}`);
    await page.locator('.diff-legend').waitFor();
    await page.waitForFunction(() => document.querySelector('.diff-toggle').classList.contains('active'));
    // idle ran only in the baseline: it is drawn once the merged graph is.
    await page.waitForFunction(() => window.__kiln_stats?.find?.('idle'));
    const [dr, , db] = await pixelOf('draw');
    assert.ok(dr > db + 60, `draw grew: red (${dr} vs ${db})`);
    const [lr, , lb] = await pixelOf('lex');
    assert.ok(lb > lr + 60, `lex shrank: blue (${lr} vs ${lb})`);
    const [ir, , ib] = await pixelOf('idle');
    assert.ok(ib > ir + 60, `idle is gone: blue (${ir} vs ${ib})`);
    // Each range is half the width: idle's 15 % of the baseline is 7.5 %.
    const idle = await boxOf('idle');
    const canvas = await page.locator('.flame-canvas').boundingBox();
    assert.ok(Math.abs(idle.w / canvas.width - 0.075) < 0.005, `idle is ${idle.w} of ${canvas.width} px`);
    // Once /api/v1/compare has answered, the tooltip says whether the
    // function moved beyond sampling noise.
    const significant = ' · the function changed significantly';
    await page.mouse.move(idle.x + idle.w / 2, idle.y + idle.h / 2);
    await page.waitForFunction((s) => document.querySelector('.tooltip-figures')?.textContent
      === `now 0 samples (0.00%) · baseline 15 samples (15.00%) → -15.00 points${s}`, significant);
    const draw = await boxOf('draw');
    await page.mouse.move(draw.x + draw.w / 2, draw.y + draw.h / 2);
    await page.waitForFunction((s) => document.querySelector('.tooltip-figures')?.textContent
      === `now 85 samples (85.00%) · baseline 40 samples (40.00%) → +45.00 points${s}`, significant);
    // alloc went from 10 of 100 samples to 5 of 100: noise at these
    // counts (two-proportion z-test, p ≈ 0.18), so it is drawn muted,
    // where lex's 30 → 5 is full blue.
    const alloc = await boxOf('alloc');
    await page.mouse.move(alloc.x + alloc.w / 2, alloc.y + alloc.h / 2);
    await page.waitForFunction(() => document.querySelector('.tooltip-figures')?.textContent
      === 'now 5 samples (5.00%) · baseline 10 samples (10.00%) → -5.00 points · within sampling noise');
    const [ar, , ab] = await pixelOf('alloc');
    assert.ok(ab - ar < 60, `alloc is muted (${ar} vs ${ab})`);
    await screenshot(page, 'diff');
    // The toolbar's diff button turns it off, and on again with the range
    // before the current one as the baseline.
    await page.click('.diff-toggle');
    await page.waitForFunction(() => !new URL(location).searchParams.get('base_from'));
    await page.click('.diff-toggle');
    await page.waitForFunction(() => new URL(location).searchParams.get('base_from'));
  });
});

describe('export and looks', () => {
  test('PNG and SVG download, and the API serves pprof and speedscope', async () => {
    await page.goto(`${kiln.url}/?from=now-10m`);
    await waitForGraph(200);
    const [png] = await Promise.all([page.waitForEvent('download'), page.click('.export-png')]);
    assert.equal(png.suggestedFilename(), 'kiln-flamegraph.png');
    const [svg] = await Promise.all([page.waitForEvent('download'), page.click('.export-svg')]);
    assert.equal(svg.suggestedFilename(), 'kiln-flamegraph.svg');
    for (const format of ['collapsed', 'pprof', 'speedscope']) {
      const href = await page.locator(`.export-${format}`).getAttribute('href');
      const response = await fetch(`${kiln.url}${href}`, { headers: auth(kiln.url) });
      assert.equal(response.status, 200, format);
      assert.ok((await response.arrayBuffer()).byteLength > 0, format);
    }
  });

  test('the light theme and an API error state', async () => {
    await page.keyboard.press('t');
    await page.waitForFunction(() => document.documentElement.dataset.theme === 'light');
    await waitForGraph(200);
    await screenshot(page, 'light-theme');
    await page.goto(`${kiln.url}/?from=yesterday-ish`);
    await page.locator('.error-state').waitFor();
    assert.match(await page.locator('.error-state').textContent(), /Could not load the flamegraph.*from.*not a time/);
    await screenshot(page, 'error-state');
  });
});

describe('metric charts', () => {
  // An agent batch from a host with two GPUs and one training process:
  // utilization and memory of each GPU and the process's GPU memory every
  // second for ten minutes from 1700000400 (kiln/tests/metrics.rs builds
  // it and checks its values through the API), and 1140 CPU samples.
  const batch = join(repoRoot, 'frontend', 'e2e', 'fixtures', 'gpu-metrics.batch');
  const from = 1700000400;
  const to = from + 600;
  const chart = (name) => `.metric-chart[data-metric="${name}"]`;
  const lines = (name) => page.locator(`${chart(name)} path.metric-line`).count();

  test('GPU metrics draw one chart per metric and one line per GPU, filtered like the flamegraph', async () => {
    // A range without metrics has no metrics panel.
    await page.goto(`${kiln.url}/?from=now-10m`);
    await waitForGraph(200);
    assert.equal(await page.locator('.metrics-panel').count(), 0);

    const accepted = await postBatch(kiln.url, readFileSync(batch));
    assert.equal(accepted.metric_points, 3000);
    // Agent batches are answered once durable: wait until written.
    const names = `${kiln.url}/api/v1/metrics/names?from=${from}&to=${to}`;
    for (let i = 0; ; i++) {
      const body = await (await fetch(names, { headers: auth(kiln.url) })).json();
      if (body.names.length === 3) break;
      assert.ok(i < 300, `metrics never became queryable: ${JSON.stringify(body)}`);
      await sleep(100);
    }

    await page.goto(`${kiln.url}/?from=${from}&to=${to}`);
    await waitForGraph(1140);
    await page.locator(`${chart('gpu.utilization_percent')} path.metric-line`).first().waitFor();
    assert.equal(await page.locator('.metric-chart').count(), 3);
    assert.equal(await lines('gpu.utilization_percent'), 2);
    assert.equal(await lines('gpu.memory_used_bytes'), 2);
    assert.equal(await lines('gpu.process_memory_used_bytes'), 1);
    const legend = await page.locator(`${chart('gpu.utilization_percent')} .metric-legend`).textContent();
    assert.match(legend, /gpu=0 .*%.*gpu=1 .*%/);
    // The charts share CPU over time's axis: same width, and the pointer's
    // line shows on every chart.
    const cpu = await page.locator('.timeline-box').boundingBox();
    const util = await page.locator(`${chart('gpu.utilization_percent')} .metric-box`).boundingBox();
    assert.ok(Math.abs(cpu.x - util.x) < 1 && Math.abs(cpu.width - util.width) < 1,
      `CPU chart ${cpu.x}+${cpu.width}, metric chart ${util.x}+${util.width}`);
    await page.mouse.move(util.x + util.width / 2, util.y + util.height / 2);
    await page.locator('.timeline-box .hover-line').waitFor();
    assert.equal(await page.locator('.metric-box .hover-line').count(), 3);
    await screenshot(page, 'metric-charts');

    // Dragging across a metric chart picks the range, as on CPU over time.
    await page.mouse.move(util.x + util.width * 0.1, util.y + util.height / 2);
    await page.mouse.down();
    await page.mouse.move(util.x + util.width * 0.4, util.y + util.height / 2, { steps: 4 });
    await page.mouse.up();
    await page.waitForFunction((f) => Number(new URL(location).searchParams.get('from')) > f, from + 30);
    const picked = new URL(page.url()).searchParams;
    assert.ok(Math.abs(Number(picked.get('from')) - (from + 60)) < 10, `from ${picked.get('from')}`);
    assert.ok(Math.abs(Number(picked.get('to')) - (from + 240)) < 10, `to ${picked.get('to')}`);

    // Label filters narrow the series: GPU 1 only, and the process's memory
    // (on GPU 0) has no series left, so its chart goes.
    await page.goto(`${kiln.url}/?from=${from}&to=${to}&label.gpu=1`);
    await page.waitForFunction(() => document.querySelectorAll('.metric-chart').length === 2);
    assert.equal(await lines('gpu.utilization_percent'), 1);
    assert.equal(await page.locator(`${chart('gpu.utilization_percent')} path.metric-line`).getAttribute('data-series'), 'gpu=1');
    assert.equal(await page.locator(chart('gpu.process_memory_used_bytes')).count(), 0);
  });
});

describe('GPU view', () => {
  // Ten seconds of a CUDA process from 1700013600, as the agent sends them
  // (kiln/tests/gpu_view.rs builds these batches and checks the API's
  // figures): gemm 240 launches of 1.5 ms a second with PC samples at
  // three instructions, relu 100 launches of 0.2 ms a second in the last
  // five.
  const fixture = (unit) => join(repoRoot, 'frontend', 'e2e', 'fixtures', `gpu-view-${unit}.batch`);
  const from = 1700013600;
  const to = from + 10;
  const GEMM = '_Z4gemmPKfS0_Pfi';

  test('the kernel table and a kernel\'s SASS with stall reasons, linked to a Perfetto trace', async () => {
    // A range without GPU kernels has no GPU panel.
    await page.goto(`${kiln.url}/?from=now-10m`);
    await waitForGraph(200);
    assert.equal(await page.locator('.gpu-panel').count(), 0);

    for (const unit of ['nanoseconds', 'launches', 'samples']) {
      await postBatch(kiln.url, readFileSync(fixture(unit)));
    }
    const api = `${kiln.url}/api/v1/gpu/kernels?from=${from}&to=${to}`;
    for (let i = 0; ; i++) {
      const body = await (await fetch(api, { headers: auth(kiln.url) })).json();
      if (body.kernels.length === 2 && body.kernels.every((k) => k.launches > 0 && k.pc_samples > 0)) break;
      assert.ok(i < 300, `GPU kernels never became queryable: ${JSON.stringify(body)}`);
      await sleep(100);
    }

    await page.goto(`${kiln.url}/?from=${from}&to=${to}`);
    await page.locator('.gpu-row').first().waitFor();
    assert.equal(await page.locator('.gpu-row').count(), 2);
    const gemm = page.locator(`.gpu-row[data-kernel="${GEMM}"]`);
    assert.equal(await page.locator('.gpu-row').first().getAttribute('data-kernel'), GEMM, 'most GPU time first');
    assert.equal(await gemm.locator('.kernel-name').textContent(), 'gemm(float const*, float const*, float*, int)');
    assert.equal(await gemm.locator('.launches').textContent(), '2400');
    assert.equal(await gemm.locator('.pc-samples').textContent(), '540');
    assert.match(await gemm.textContent(), /3\.6 s.*1\.5 ms.*97\.3%/);
    assert.match(await page.locator('.gpu-summary').textContent(), /2 kernels · 3\.7 s GPU time · 570 PC samples/);

    // Opening a kernel shows its instructions in address order, each bar
    // split by stall reason, and puts the kernel in the URL.
    await gemm.click();
    await page.locator('.sass-row').first().waitFor();
    assert.equal(new URL(page.url()).searchParams.get('kernel'), GEMM);
    assert.equal(await page.locator('.sass-kernel').textContent(), 'gemm(float const*, float const*, float*, int)');
    const offsets = await page.locator('.sass-row').evaluateAll((rows) => rows.map((r) => r.dataset.offset));
    assert.deepEqual(offsets, ['0x90', '0x1a0', '0x2f0']);
    const first = page.locator('.sass-row').first();
    assert.equal(await first.locator('.sass-text').textContent(), 'LDG.E R2, desc[UR4][R2.64]');
    assert.equal(await first.locator('.sass-samples').textContent(), '350');
    const reasons = await first.locator('.stall-seg').evaluateAll((s) => s.map((e) => e.dataset.reason));
    assert.deepEqual(reasons, ['long_scoreboard', 'selected']);
    assert.match(await first.locator('.stall-bar').getAttribute('title'), /long_scoreboard 300 \(85\.7%\), selected 50 \(14\.3%\)/);
    // The busiest instruction's bar is full width; the others in proportion.
    const barWidth = (row) => row.locator('.stall-seg').evaluateAll((s) => s.reduce((w, e) => w + e.getBoundingClientRect().width, 0));
    const full = await barWidth(first);
    const ffma = await barWidth(page.locator('.sass-row').nth(1));
    assert.ok(Math.abs(ffma / full - 150 / 350) < 0.02, `FFMA bar ${ffma} px of ${full} px`);
    assert.match(await page.locator('.stall-legend').textContent(), /long_scoreboard.*55\.6%/);
    await screenshot(page, 'gpu-view');

    // The kernel's Perfetto link downloads a Chrome JSON trace of its GPU
    // time over the range.
    const href = await page.locator('.gpu-trace-kernel').getAttribute('href');
    assert.match(href, new RegExp(`kernel=${GEMM}&from=${from}&to=${to}`));
    const trace = await page.evaluate(async (url) => (await fetch(url)).json(), href);
    const counters = trace.traceEvents.filter((e) => e.ph === 'C');
    assert.ok(counters.length >= 10, `${counters.length} counter events`);
    assert.ok(counters.every((e) => e.name === 'gemm(float const*, float const*, float*, int)'));
    assert.ok(counters.some((e) => Math.abs(e.args.gpus - 0.36) < 1e-9), JSON.stringify(counters.slice(0, 3)));

    // The open kernel survives a reload (it is in the URL), and close
    // shuts it.
    await page.reload();
    await page.locator('.sass-row').first().waitFor();
    await page.locator('.close-sass').click();
    await page.waitForFunction(() => !new URL(location).searchParams.has('kernel'));
    assert.equal(await page.locator('.sass').count(), 0);
  });
});
