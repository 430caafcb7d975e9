#!/usr/bin/env node
// Browser test of MimicArena's pages against a running server, with playwright-core and the
// system's Chromium (no browser download).
//
//   node web/tests/pages.mjs --base http://127.0.0.1:PORT --admin ADMIN_TOKEN \
//       [--team TEAM_TOKEN] --submission SUBMISSION_ID [--benchmark g1-smoke] [--out DIR] \
//       [--policy FILE.onnx --hosted-benchmark g1-smoke-robot]
//
// Visits every page (home, benchmark, leaderboard, phase, submission, episode, team, admin),
// fails on any console error, page error, failed request or unexpected HTTP error (4xx
// responses the test provokes on purpose are allowed), checks what each page must show, and
// saves a full-page screenshot of each as DIR/<page>.png (and admin-1600.png, leaderboard-1600.png
// at 1600 px, where nothing may be clipped either). Without --team, a token for the
// submission's team is issued through the admin API. With --policy, a team hands the file in
// through the phase page's upload form (a hosted-only phase on --hosted-benchmark) and the
// hosted submission's page is checked. Prints one JSON line; exit code 0 only if every check
// passed.
//
// Environment: CHROMIUM (default /usr/bin/chromium), HEADED=1 to watch.

import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';

// ---------------- arguments ----------------
function parseArgs(argv) {
  const out = { benchmark: 'g1-smoke', out: 'web-test-out' };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith('--')) continue;
    const key = a.slice(2);
    const val = argv[i + 1] && !argv[i + 1].startsWith('--') ? argv[++i] : 'true';
    out[key] = val;
  }
  return out;
}
const args = parseArgs(process.argv.slice(2));
if (!args.base || !args.admin || !args.submission) {
  console.error('usage: node web/tests/pages.mjs --base URL --admin TOKEN [--team TOKEN] --submission ID [--benchmark NAME] [--out DIR]');
  process.exit(2);
}
const BASE = args.base.replace(/\/+$/, '');
const OUT = path.resolve(args.out);
mkdirSync(OUT, { recursive: true });
const T = Number(process.env.PAGES_TIMEOUT_MS || 30000);

// ---------------- results ----------------
const checks = [];
const problems = []; // console errors, page errors, failed requests, unexpected HTTP errors
const warnings = [];
const screenshots = [];
let currentStep = 'start';

function check(name, ok, detail) {
  checks.push({ name, ok: !!ok, ...(detail !== undefined ? { detail } : {}) });
  if (!process.env.QUIET) process.stderr.write(`${ok ? 'ok  ' : 'FAIL'} ${name}${detail !== undefined ? `: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}` : ''}\n`);
  return !!ok;
}

const timings = {};
async function step(name, fn) {
  currentStep = name;
  const t0 = Date.now();
  try {
    await fn();
    timings[name] = Date.now() - t0;
  } catch (e) {
    timings[name] = Date.now() - t0;
    check(`${name}: completed without exception`, false, String(e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e));
  }
}

// Expected HTTP errors: [{method, re, status}] active for the current step.
let allowed = [];
function allow(list) {
  allowed = list;
}
function isAllowed(method, url, status) {
  const p = new URL(url).pathname;
  return allowed.some((a) => (a.method || 'GET') === method && a.re.test(p) && (a.status === undefined || a.status === status));
}
const seenAllowed = []; // URLs of allowed error responses (their console lines are expected)

// ---------------- browser ----------------
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: !process.env.HEADED,
  args: [
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--disable-extensions',
    '--disable-default-apps',
    '--use-angle=swiftshader',
    '--enable-unsafe-swiftshader',
    '--ignore-gpu-blocklist',
  ],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, acceptDownloads: true, deviceScaleFactor: 1 });
const page = await context.newPage();
page.setDefaultTimeout(T);

const baseHost = new URL(BASE).host;
page.on('console', (msg) => {
  const type = msg.type();
  const text = msg.text();
  const loc = msg.location() || {};
  if (type === 'error') {
    // Chromium logs every HTTP error response as "Failed to load resource"; those the test
    // provoked on purpose are fine.
    if (/^Failed to load resource: the server responded with a status of [45]\d\d/.test(text) && loc.url && seenAllowed.includes(loc.url)) return;
    problems.push({ kind: 'console.error', step: currentStep, text, url: loc.url });
  } else if (type === 'warning') {
    warnings.push({ step: currentStep, text: text.slice(0, 300), url: loc.url });
  }
});
// A Content-Security-Policy refusal (an inline script or style, a load from elsewhere) is a
// problem even where Chromium logs no console error for it.
await page.exposeFunction('__cspViolation', (what) => problems.push({ kind: 'csp', step: currentStep, text: what }));
await page.addInitScript(() => {
  document.addEventListener('securitypolicyviolation', (e) => {
    window.__cspViolation(`${e.effectiveDirective} refused ${e.blockedURI || 'inline'} (${e.sourceFile || ''}:${e.lineNumber || ''})`);
  });
});
page.on('pageerror', (err) => problems.push({ kind: 'pageerror', step: currentStep, text: String(err && err.stack ? err.stack : err).slice(0, 800) }));
page.on('requestfailed', (req) => {
  const f = req.failure();
  const why = f ? f.errorText : '?';
  // Navigating away aborts the previous page's pending API calls on purpose.
  if (why === 'net::ERR_ABORTED' && req.url().includes('/api/v1/') && req.method() === 'GET') {
    warnings.push({ step: currentStep, text: `aborted ${req.method()} ${req.url()}` });
    return;
  }
  problems.push({ kind: 'requestfailed', step: currentStep, text: `${req.method()} ${req.url()}: ${why}` });
});
page.on('request', (req) => {
  const u = new URL(req.url());
  if (!['data:', 'blob:'].includes(u.protocol) && u.host !== baseHost) {
    problems.push({ kind: 'foreign-host', step: currentStep, text: `${req.method()} ${req.url()}` });
  }
});
page.on('response', (res) => {
  const st = res.status();
  if (st < 400) return;
  const req = res.request();
  if (isAllowed(req.method(), res.url(), st)) {
    seenAllowed.push(res.url());
    return;
  }
  problems.push({ kind: 'http', step: currentStep, text: `${req.method()} ${res.url()} -> ${st}` });
});

// ---------------- helpers ----------------
async function go(hash) {
  const before = await page.evaluate(() => document.getElementById('app')?.dataset.ready || '').catch(() => '');
  if (page.url().startsWith(BASE)) {
    await page.evaluate((h) => {
      location.hash = h;
    }, hash);
  } else {
    await page.goto(`${BASE}/${hash}`, { waitUntil: 'domcontentloaded' });
  }
  // The router marks #app with data-ready=<seq> once a page finished rendering.
  await page.waitForFunction((b) => {
    const el = document.getElementById('app');
    return el && el.dataset.ready && el.dataset.ready !== b && !el.hasAttribute('aria-busy');
  }, before);
}

async function shot(name) {
  // No placeholder text leaked into the page (a null, undefined or NaN rendered as text).
  const text = await page.evaluate(() => document.getElementById('app').innerText);
  const leak = /\b(null|undefined|NaN)\b|\[object Object\]/.exec(text);
  check(`${name}: no null/undefined/NaN text`, !leak, leak ? text.slice(Math.max(0, leak.index - 60), leak.index + 20) : undefined);
  const one = /\b1\s+(submissions|episodes|entries|clips|teams|rows|tokens)\b/.exec(text);
  check(`${name}: counts of one are singular`, !one, one ? text.slice(Math.max(0, one.index - 40), one.index + 30) : undefined);
  const file = path.join(OUT, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  screenshots.push(file);
}

async function setToken(token) {
  if (!token) {
    if (await page.locator('#token-clear').isVisible()) await page.click('#token-clear');
    await page.waitForFunction(() => document.getElementById('whoami')?.dataset.role === 'anonymous');
    return 'anonymous';
  }
  await page.fill('#token-input', token);
  await page.click('#token-set');
  await page.waitForFunction(() => {
    const r = document.getElementById('whoami')?.dataset.role;
    return r && r !== 'anonymous' && document.getElementById('whoami').textContent !== 'checking…';
  });
  await page.waitForFunction(() => !document.getElementById('app').hasAttribute('aria-busy'));
  return page.evaluate(() => document.getElementById('whoami').dataset.role);
}

/** fetch() inside the page (same origin) with a token; returns status, content type, first bytes. */
async function pageFetch(url, token, { method = 'GET', body } = {}) {
  return page.evaluate(
    async ({ url, token, method, body }) => {
      const headers = {};
      if (token) headers.Authorization = `Bearer ${token}`;
      if (body !== undefined) headers['Content-Type'] = 'application/json';
      const r = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
      const buf = new Uint8Array(await r.arrayBuffer());
      let json = null;
      let text = null;
      try {
        text = new TextDecoder().decode(buf);
        json = JSON.parse(text);
      } catch {
        /* binary */
        text = null;
      }
      return { status: r.status, type: r.headers.get('content-type'), size: buf.length, head: Array.from(buf.slice(0, 8)), json, text };
    },
    { url, token, method, body },
  );
}

/** Buttons whose text is cut (scrollWidth > clientWidth) or that lie beyond the visible part of
 * their table's scrolling box, and tables wider than their box (a hidden last column). */
async function clipping() {
  return page.evaluate(() => {
    const out = { buttons: [], hidden: [], wide: [] };
    for (const b of document.querySelectorAll('#app button')) {
      if (!b.offsetParent) continue;
      if (b.scrollWidth > b.clientWidth) out.buttons.push(`${b.textContent} (${b.scrollWidth} > ${b.clientWidth})`);
      const wrap = b.closest('.table-wrap');
      if (wrap) {
        const r = b.getBoundingClientRect();
        const w = wrap.getBoundingClientRect();
        if (r.right > w.right + 0.5 || r.left < w.left - 0.5) out.hidden.push(b.textContent);
      }
    }
    for (const w of document.querySelectorAll('#app .table-wrap')) {
      if (w.scrollWidth > w.clientWidth) out.wide.push(`${w.querySelector('table')?.dataset.testid} (${w.scrollWidth} > ${w.clientWidth})`);
    }
    return out;
  });
}

/** Checks clipping() at the current viewport, and again at 1600x900 (with a screenshot). */
async function checkNoClipping(name) {
  const c = await clipping();
  check(`${name}: no clipped button or hidden column at 1280 px`, !c.buttons.length && !c.hidden.length && !c.wide.length, c);
  await page.setViewportSize({ width: 1600, height: 900 });
  await page.waitForTimeout(100);
  const w = await clipping();
  check(`${name}: no clipped button or hidden column at 1600 px`, !w.buttons.length && !w.hidden.length && !w.wide.length, w);
  await page.screenshot({ path: path.join(OUT, `${name}-1600.png`), fullPage: true });
  screenshots.push(path.join(OUT, `${name}-1600.png`));
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.waitForTimeout(100);
}

async function rowCount(sel) {
  return page.locator(`${sel} tbody tr:not(.empty)`).count();
}

/** Counts the replay canvas' pixels that are neither background nor floor grid (the grid alone
 * leaves none; the two robots give some 20000-30000 at 1193x630). */
async function canvasPixels() {
  return page.evaluate(async () => {
    const c = document.querySelector('[data-testid=replay-canvas]');
    if (!c) return { error: 'no canvas' };
    const img = new Image();
    img.src = c.toDataURL('image/png');
    await img.decode();
    const cv = document.createElement('canvas');
    cv.width = img.width;
    cv.height = img.height;
    const ctx = cv.getContext('2d', { willReadFrequently: true });
    ctx.drawImage(img, 0, 0);
    const d = ctx.getImageData(0, 0, cv.width, cv.height).data;
    const bg = [245, 247, 250];
    const greys = [
      [200, 208, 216],
      [154, 167, 180],
    ];
    // distance from the colour segment bg->grid colour (anti-aliased grid lines lie on it)
    const segDist = (p, a, b) => {
      const ab = [b[0] - a[0], b[1] - a[1], b[2] - a[2]];
      const ap = [p[0] - a[0], p[1] - a[1], p[2] - a[2]];
      let t = (ab[0] * ap[0] + ab[1] * ap[1] + ab[2] * ap[2]) / (ab[0] ** 2 + ab[1] ** 2 + ab[2] ** 2);
      t = Math.max(0, Math.min(1, t));
      return Math.hypot(ap[0] - t * ab[0], ap[1] - t * ab[1], ap[2] - t * ab[2]);
    };
    let background = 0;
    let robot = 0;
    let orange = 0;
    for (let i = 0; i < d.length; i += 4) {
      const p = [d[i], d[i + 1], d[i + 2]];
      if (Math.hypot(p[0] - bg[0], p[1] - bg[1], p[2] - bg[2]) < 6) {
        background++;
        continue;
      }
      if (Math.min(segDist(p, bg, greys[0]), segDist(p, bg, greys[1]), segDist(p, greys[0], greys[1])) < 7) continue;
      robot++;
      if (p[0] - p[2] > 40) orange++;
    }
    return { width: cv.width, height: cv.height, total: d.length / 4, background, robot, orange };
  });
}

// ---------------- the run ----------------
const stamp = Date.now().toString(36);
const challengeId = `ui-test-${stamp}`;
const phaseId = `ui-test-${stamp}-open`;
const privatePhaseId = `ui-test-${stamp}-hidden`;
const SID = args.submission;
let teamToken = args.team && args.team !== 'true' ? args.team : null;
let submission = null;
let phaseBenchmark = args.benchmark;
let episodeIdx = 0;

await step('home (anonymous)', async () => {
  allow([]);
  await page.goto(`${BASE}/`, { waitUntil: 'domcontentloaded' });
  await page.waitForFunction(() => document.getElementById('app')?.dataset.ready);
  await page.waitForSelector('[data-testid=benchmark-card]');
  const names = await page.$$eval('[data-testid=benchmark-card]', (els) => els.map((e) => e.dataset.benchmark));
  check('home lists the benchmark', names.includes(args.benchmark), names);
  check('nav bar and token box present', (await page.locator('[data-testid=nav-home]').count()) === 1 && (await page.locator('#token-input').count()) === 1);
  check('anonymous identity shown', (await page.textContent('#whoami')) === 'anonymous');
  const others = names.filter((n) => n !== args.benchmark);
  // Phases made by this test go on another benchmark when there is one that this server can
  // run (a phase on one whose motions are missing is refused), so practice runs of the tested
  // benchmark stay allowed.
  for (const name of others) {
    if (name === args['hosted-benchmark']) continue; // the hosted phase's, kept public
    const b = await pageFetch(`/api/v1/benchmarks/${encodeURIComponent(name)}`, null);
    if (b.status === 200 && b.json && Array.isArray(b.json.motion_list)) {
      phaseBenchmark = name;
      break;
    }
  }
});

await step('admin token', async () => {
  allow([]);
  const role = await setToken(args.admin);
  check('admin token recognised', role === 'admin', await page.textContent('#whoami'));
  const r = await pageFetch(`/api/v1/submissions/${encodeURIComponent(SID)}`, args.admin);
  check('submission exists (API)', r.status === 200, r.status);
  submission = r.json;
  if (!teamToken && submission) {
    const t = await pageFetch(`/api/v1/teams/${submission.team_id}/tokens`, args.admin, { method: 'POST', body: { label: 'pages.mjs' } });
    check('team token issued for the submission team (API)', t.status === 201, t.status);
    teamToken = t.json && t.json.token;
  }
});

await step('admin page', async () => {
  allow([]);
  await go('#/admin');
  await page.waitForSelector('[data-testid=form-challenge]');
  await page.fill('[data-testid=challenge-id]', challengeId);
  await page.fill('[data-testid=challenge-title]', `UI test ${stamp}`);
  await page.fill('[data-testid=challenge-description]', 'Made by web/tests/pages.mjs');
  await page.click('[data-testid=form-challenge-submit]');
  await page.waitForSelector('[data-testid=challenge-created], [data-testid=form-challenge-out] .error');
  check('challenge created through the form', (await page.locator('[data-testid=challenge-created]').count()) === 1, await page.textContent('[data-testid=form-challenge-out]'));

  await page.selectOption('[data-testid=phase-challenge]', challengeId);
  await page.fill('[data-testid=phase-id]', phaseId);
  await page.selectOption('[data-testid=phase-benchmark]', phaseBenchmark);
  const now = Date.now();
  await page.fill('[data-testid=phase-starts]', new Date(now - 86400000).toISOString().replace(/\.\d+Z$/, 'Z'));
  await page.fill('[data-testid=phase-ends]', new Date(now + 30 * 86400000).toISOString().replace(/\.\d+Z$/, 'Z'));
  await page.selectOption('[data-testid=phase-leaderboard]', 'public');
  await page.fill('[data-testid=phase-max-day]', '5');
  await page.click('[data-testid=form-phase-submit]');
  await page.waitForSelector('[data-testid=phase-created], [data-testid=form-phase-out] .error');
  check('phase created through the form', (await page.locator('[data-testid=phase-created]').count()) === 1, await page.textContent('[data-testid=form-phase-out]'));

  // The organiser's phase list shows it; the edit form changes it (PATCH) and says so.
  const phaseRow = page.locator(`[data-testid=admin-phase-table] tr[data-phase-id="${phaseId}"]`);
  await phaseRow.waitFor();
  check('phase listed on the organiser page', (await phaseRow.count()) === 1, await phaseRow.textContent());
  await phaseRow.locator('[data-testid=phase-edit]').click();
  check('Edit fills the phase form', (await page.inputValue('[data-testid=edit-phase-id]')) === phaseId && (await page.inputValue('[data-testid=edit-max-day]')) === '5', {
    phase: await page.inputValue('[data-testid=edit-phase-id]'),
    starts: await page.inputValue('[data-testid=edit-starts]'),
    maxDay: await page.inputValue('[data-testid=edit-max-day]'),
  });
  await page.click('[data-testid=form-phase-edit-submit]');
  await page.waitForSelector('[data-testid=phase-unchanged]');
  check('unchanged phase form: nothing sent, says so', true);
  const newEnd = new Date(now + 45 * 86400000).toISOString().replace(/\.\d+Z$/, 'Z');
  await page.fill('[data-testid=edit-ends]', newEnd);
  await page.fill('[data-testid=edit-max-day]', '');
  await page.fill('[data-testid=edit-max-total]', '7');
  await page.selectOption('[data-testid=edit-leaderboard]', 'private');
  await page.selectOption('[data-testid=edit-runs]', 'hosted');
  await page.click('[data-testid=form-phase-edit-submit]');
  await page.waitForSelector('[data-testid=phase-updated], [data-testid=form-phase-edit-out] .error');
  check('phase saved through the edit form', (await page.locator('[data-testid=phase-updated]').count()) === 1, await page.textContent('[data-testid=form-phase-edit-out]'));
  // Made private: the page passes on the server's warning when its clips are reachable elsewhere
  // (the shipped g1-smoke and g1-smoke-robot share the built-in motions).
  const warned = await page.$$eval('[data-testid=phase-warnings] li', (l) => l.map((x) => x.textContent));
  check('a phase made private is warned of its clips in other benchmarks', warned.length >= 1 && warned.every((w) => /also appear in benchmark/.test(w)), warned);
  const pr = await pageFetch(`/api/v1/phases/${phaseId}`, null);
  const pj = pr.json || {};
  check(
    'phase edit round trip (API: ends_at, quotas, leaderboard)',
    pj.ends_at === Date.parse(newEnd) && pj.max_submissions_per_day === null && pj.max_submissions_total === 7 && pj.leaderboard === 'private' && pj.hosted_only === true,
    { ends_at: pj.ends_at, want: Date.parse(newEnd), max_submissions_per_day: pj.max_submissions_per_day, max_submissions_total: pj.max_submissions_total, leaderboard: pj.leaderboard },
  );
  check('phase list shows the new values', /7 total/.test(await phaseRow.textContent()) && (await phaseRow.locator('[data-testid=phase-visibility]').textContent()) === 'private' && (await phaseRow.locator('[data-testid=phase-hosted-only]').count()) === 1, await phaseRow.textContent());
  // The API's refusal shows inline: a phase that would close before it opens.
  allow([{ method: 'PATCH', re: /^\/api\/v1\/phases\/[^/]+$/, status: 400 }]);
  await page.fill('[data-testid=edit-ends]', new Date(now - 2 * 86400000).toISOString().replace(/\.\d+Z$/, 'Z'));
  await page.click('[data-testid=form-phase-edit-submit]');
  await page.waitForSelector('[data-testid=form-phase-edit-out] .error');
  const editErr = (await page.textContent('[data-testid=form-phase-edit-out] .error')) || '';
  check('phase edit: the API error shown inline', /ends_at/.test(editErr), editErr.slice(0, 160));
  allow([]);
  // Back to public (the later steps read its leaderboard as a public one).
  await phaseRow.locator('[data-testid=phase-edit]').click();
  await page.selectOption('[data-testid=edit-leaderboard]', 'public');
  await page.selectOption('[data-testid=edit-runs]', 'agents');
  await page.click('[data-testid=form-phase-edit-submit]');
  await page.waitForSelector('[data-testid=phase-updated], [data-testid=form-phase-edit-out] .error');
  const back = (await pageFetch(`/api/v1/phases/${phaseId}`, null)).json || {};
  check('phase back to public and to agents', back.leaderboard === 'public' && back.hosted_only === false, back);

  // An error from the API shows inline next to the form (duplicate id -> 409).
  allow([{ method: 'POST', re: /^\/api\/v1\/challenges$/, status: 409 }]);
  await page.fill('[data-testid=challenge-id]', challengeId);
  await page.fill('[data-testid=challenge-title]', 'duplicate');
  await page.click('[data-testid=form-challenge-submit]');
  await page.waitForSelector('[data-testid=form-challenge-out] .error');
  check('API error shown inline (duplicate challenge)', true, (await page.textContent('[data-testid=form-challenge-out] .error')).slice(0, 120));
  // When the browser's own check then blocks a submit (empty required title), that error goes.
  await page.fill('[data-testid=challenge-title]', '');
  await page.click('[data-testid=form-challenge-submit]');
  await page.waitForFunction(() => document.querySelector('[data-testid=form-challenge-out] .error') === null, null, { timeout: 5000 }).catch(() => {});
  check('a stale API error goes when the browser blocks the next submit', (await page.locator('[data-testid=form-challenge-out] .error').count()) === 0);
  allow([]);

  const teamName = `ui-team-${stamp}`;
  await page.fill('[data-testid=team-name]', teamName);
  await page.click('[data-testid=form-team-submit]');
  await page.waitForSelector('[data-testid=form-team-out] [data-testid=new-token], [data-testid=form-team-out] .error');
  const tok = (await page.textContent('[data-testid=form-team-out]')) || '';
  check('team created, token shown once', /at_/.test(tok), tok.slice(0, 80));
  await page.waitForSelector(`[data-testid=teams-table] >> text=${teamName}`);
  check('team listed', true);

  // The team's tokens: listed (the one made with the team), a second issued, then revoked.
  await page.locator(`[data-testid=teams-table] tr:has-text("${teamName}") [data-testid=team-tokens]`).click();
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=tokens-table] tbody tr:not(.empty)').length >= 1);
  check('team tokens listed (Tokens button)', (await rowCount('[data-testid=tokens-table]')) === 1);
  const teamOpt = await page.$eval('[data-testid=tokens-team]', (el) => el.value);
  await page.selectOption('[data-testid=token-team]', teamOpt);
  await page.fill('[data-testid=token-label]', 'pages-revoke');
  await page.click('[data-testid=form-token-submit]');
  await page.waitForSelector('[data-testid=form-token-out] [data-testid=new-token], [data-testid=form-token-out] .error');
  const revokeMe = ((await page.textContent('[data-testid=form-token-out] [data-testid=new-token]').catch(() => '')) || '').trim();
  const tokRow = page.locator('[data-testid=tokens-table] tbody tr:has-text("pages-revoke")');
  await tokRow.waitFor();
  check('issued token appears in the list, active', (await rowCount('[data-testid=tokens-table]')) === 2 && (await tokRow.locator('[data-testid=token-state]').textContent()) === 'active');
  const before = await pageFetch('/api/v1/whoami', revokeMe);
  check('the new token works (API)', before.status === 200 && before.json && before.json.role === 'team', before.status);
  page.once('dialog', (d) => d.accept());
  await tokRow.locator('[data-testid=btn-revoke]').click();
  await page.waitForSelector('[data-testid=token-revoked], [data-testid=tokens-out] .error');
  check('token revoked through the page, with feedback', (await page.locator('[data-testid=token-revoked]').count()) === 1, await page.textContent('[data-testid=tokens-out]'));
  const revokedRow = page.locator('[data-testid=tokens-table] tbody tr:has-text("pages-revoke")');
  check('revoked token shown as revoked, without a Revoke button', (await revokedRow.locator('[data-testid=token-state]').textContent()) === 'revoked' && (await revokedRow.locator('[data-testid=btn-revoke]').count()) === 0);
  allow([{ re: /^\/api\/v1\/whoami$/, status: 401 }]);
  const after = await pageFetch('/api/v1/whoami', revokeMe);
  check('the revoked token is refused (API 401)', after.status === 401, { status: after.status, body: after.json });
  allow([]);

  check('all submissions listed for the organiser', (await page.locator(`[data-testid=submissions-table] tr[data-submission-id="${SID}"]`).count()) === 1);
  check('organiser actions present', (await page.locator(`tr[data-submission-id="${SID}"] [data-testid=btn-baseline]`).count()) === 1);
  await checkNoClipping('admin');
  await shot('admin');

  // A private phase (through the API) to check the hidden leaderboard later with a team token.
  const r = await pageFetch(`/api/v1/challenges/${challengeId}/phases`, args.admin, {
    method: 'POST',
    body: { id: privatePhaseId, benchmark: phaseBenchmark, starts_at: new Date(now - 86400000).toISOString(), ends_at: new Date(now + 86400000).toISOString(), leaderboard: 'private' },
  });
  check('private phase created (API)', r.status === 201, r.status);
});

await step('home shows the new challenge and phase', async () => {
  allow([]);
  await go('#/');
  await page.waitForSelector(`[data-challenge-id="${challengeId}"]`);
  const row = page.locator(`[data-challenge-id="${challengeId}"] tr[data-phase-id="${phaseId}"]`);
  check('new phase on the home page', (await row.count()) === 1);
  const st = await row.locator('[data-testid=phase-state]').textContent();
  check('phase state badge', st === 'open', st);
  check('private phase shown as private', (await page.locator(`tr[data-phase-id="${privatePhaseId}"] >> text=private`).count()) >= 1);
  await shot('home');
});

await step('phase page', async () => {
  allow([]);
  await go(`#/phases/${phaseId}`);
  await page.waitForSelector('[data-testid=phase-title]');
  check('phase page title', ((await page.textContent('[data-testid=phase-title]')) || '').includes(phaseId));
  await page.waitForSelector('#leaderboard [data-testid=leaderboard-table], #leaderboard .error, #leaderboard [data-testid=leaderboard-hidden]');
  check('phase leaderboard table', (await page.locator('#leaderboard [data-testid=leaderboard-table]').count()) === 1);
  await shot('phase');
});

await step('benchmark page', async () => {
  allow([]);
  await go(`#/benchmarks/${args.benchmark}`);
  await page.waitForSelector('[data-testid=benchmark-title]');
  const motions = await rowCount('[data-testid=motion-table]');
  const motionsErr = await page.locator('[data-testid=motions-error]').count();
  check('motions listed (or why not)', motions > 0 || motionsErr > 0, { motions });
  const metricRows = await rowCount('[data-testid=metric-table]');
  check('metrics listed', metricRows > 0, metricRows);
  const arrows = await page.locator('[data-testid=metric-table] .arrow').count();
  check('metric direction arrows', arrows > 0, arrows);
  check('ranking rule shown', ((await page.textContent('[data-testid=ranking-rule]')) || '').length > 10);
  check('rules shown', (await page.locator('[data-testid=rules] dt').count()) >= 8);
  await page.waitForSelector('#sec-leaderboard [data-testid=leaderboard-table]');
  check('benchmark leaderboard has the submission', (await page.locator(`#sec-leaderboard tr[data-submission-id="${SID}"]`).count()) === 1);

  // Dataset card with the default filters
  await page.click('[data-testid=dataset-card-btn]');
  await page.waitForSelector('[data-testid=dataset-card], [data-testid=dataset-out] .error');
  const counts = {};
  for (const k of ['submissions', 'teams', 'episodes', 'rows', 'duration_s']) {
    const t = await page.locator(`[data-testid=dataset-count-${k}] .count-value`).textContent({ timeout: 3000 }).catch(() => null);
    counts[k] = t;
  }
  check('dataset card counts shown', Object.values(counts).every((v) => v !== null && v !== '—') && Number(counts.episodes) > 0, counts);
  check('dataset attribution shown', ((await page.textContent('[data-testid=dataset-attribution]', { timeout: 3000 }).catch(() => '')) || '').length > 3);

  // A filter narrows the card (one motion)
  const firstMotion = await page.locator('[data-testid=motion-table] tbody tr td code').first().textContent({ timeout: 3000 }).catch(() => null);
  if (firstMotion) {
    await page.fill('[data-testid=dataset-motion]', firstMotion);
    await page.fill('[data-testid=dataset-metric]', 'emd<=1000000');
    await page.click('[data-testid=dataset-card-btn]');
    await page.waitForSelector('[data-testid=dataset-card], [data-testid=dataset-out] .error');
    const ep = await page.locator('[data-testid=dataset-count-episodes] .count-value').textContent({ timeout: 3000 }).catch(() => null);
    check('filtered dataset card (motion, metric bound)', ep !== null && Number(ep) >= 1 && Number(ep) <= Number(counts.episodes), { motion: firstMotion, episodes: ep });
    await page.fill('[data-testid=dataset-motion]', '');
    await page.fill('[data-testid=dataset-metric]', '');
  }
  // A bad filter: the server's message shows in the page.
  allow([{ re: /\/api\/v1\/datasets\/benchmarks\/[^/]+\/card$/, status: 400 }]);
  await page.fill('[data-testid=dataset-metric]', 'no_such_metric<=1');
  await page.click('[data-testid=dataset-card-btn]');
  await page.waitForSelector('[data-testid=dataset-out] .error');
  check('bad filter: API message shown', true, ((await page.textContent('[data-testid=dataset-out] .error')) || '').slice(0, 120));
  await page.fill('[data-testid=dataset-metric]', '');
  allow([]);
  await page.click('[data-testid=dataset-card-btn]');
  await page.waitForSelector('[data-testid=dataset-card]');

  // HDF5 download: the link's URL fetched with the token gives an HDF5 file.
  const url = await page.getAttribute('[data-testid=dataset-hdf5]', 'data-url');
  const r = await pageFetch(url, args.admin);
  const sig = [0x89, 0x48, 0x44, 0x46, 0x0d, 0x0a, 0x1a, 0x0a];
  check('dataset HDF5 download: 200 and HDF5 signature', r.status === 200 && sig.every((b, i) => r.head[i] === b), { url, status: r.status, type: r.type, size: r.size, head: r.head });
  // And through the page's own button (fetch -> blob -> <a download>).
  const [dl] = await Promise.all([page.waitForEvent('download'), page.click('[data-testid=dataset-hdf5]')]);
  const saved = path.join(OUT, 'dataset.h5');
  await dl.saveAs(saved);
  const fs = await import('node:fs');
  const head = Array.from(fs.readFileSync(saved).subarray(0, 8));
  check('dataset HDF5 via the page button', sig.every((b, i) => head[i] === b), { file: dl.suggestedFilename() });
  await shot('benchmark');
});

await step('leaderboard page', async () => {
  allow([]);
  await go(`#/leaderboards/${args.benchmark}`);
  await page.waitForSelector('[data-testid=leaderboard-table]');
  const row = page.locator(`[data-testid=leaderboard-table] tr[data-submission-id="${SID}"]`);
  check('leaderboard shows the submission row', (await row.count()) === 1);
  const cells = await row.locator('td').allTextContents();
  check('leaderboard row: success rate as %, score', cells.some((c) => /%$/.test(c)) && cells.length >= 8, cells);
  const headers = await page.locator('[data-testid=leaderboard-table] th').allTextContents();
  check('leaderboard headers carry units and arrows', headers.some((t) => /[↓↑]/.test(t)), headers);
  check('leaderboard shows the time to failure it ranks by', headers.some((t) => /Time to failure/.test(t)), headers);
  check('leaderboard shows the other success rule beside the ranked one', headers.some((t) => /Success, (mjlab's rule|PHC's strict rule)/.test(t)) && (await row.locator('[data-testid=other-success]').count()) === 1, headers);
  check('leaderboard caption states the rule', /time to failure/.test((await page.textContent('.lb-caption')) || ''));
  // Sorting by clicking a header
  const th = page.locator('[data-testid=leaderboard-table] th[data-key="team"]');
  await th.click();
  check('sortable header (ascending)', (await th.getAttribute('aria-sort')) === 'ascending');
  await th.click();
  check('sortable header (descending)', (await th.getAttribute('aria-sort')) === 'descending');
  check('admin: every leaderboard submission links to its page', (await row.locator('[data-testid=submission-link]').count()) === 1);
  await checkNoClipping('leaderboard');
  await shot('leaderboard');
});

await step('submission page', async () => {
  allow([]);
  await go(`#/submissions/${SID}`);
  await page.waitForSelector('[data-testid=sub-status]');
  const status = await page.textContent('[data-testid=sub-status]');
  const lit = await page.getAttribute('.mainnav a.active', 'data-nav').catch(() => null);
  const role = await page.getAttribute('#whoami', 'data-role');
  check('the nav tab lit on a submission page follows the token', lit === (role === 'admin' ? 'admin' : 'team'), { lit, role });
  check('submission status badge', ['PENDING', 'RUNNING', 'COMPLETED', 'FAILED'].includes(status), status);
  const sessions = await page.$$eval('[data-testid=sessions] li', (l) => l.map((x) => x.textContent));
  check('the agent sessions are listed, each with how it ended', sessions.length >= 1 && sessions.every((t) => / · (completed|stopped|error|running)/.test(t)), sessions);
  await page.waitForSelector('[data-testid=episode-table]');
  const eps = await rowCount('[data-testid=episode-table]');
  check('one row per episode', submission ? eps === submission.episodes_total : eps > 0, { rows: eps, total: submission && submission.episodes_total });
  const statsRows = await rowCount('[data-testid=stats-table]');
  check('aggregated statistics with quantiles', statsRows > 0 && (await page.locator('[data-testid=stats-table] th[data-key=p90]').count()) === 1, statsRows);
  const over = await page.textContent('[data-testid=stats-over]');
  check('the statistics say how many episodes they are over', /^Over the \d+ scored of \d+ episodes?/.test(over), over);
  const bars = await page.locator('[data-testid=bar-chart] .bar').count();
  check('per-motion bar chart', bars === eps, bars);
  const opts = await page.$$eval('[data-testid=bar-metric] option', (o) => o.map((x) => x.value));
  if (opts.length > 1) {
    await page.selectOption('[data-testid=bar-metric]', opts[1]);
    check('bar chart metric select redraws', (await page.locator('[data-testid=bar-chart] .bar').count()) === eps);
  }
  await page.waitForSelector('[data-testid=series-chart], [data-testid=series-holder] .error');
  const pathD = await page.getAttribute('[data-testid=series-chart] path.line', 'd', { timeout: 3000 }).catch(() => null);
  check('tracking error over time (line chart)', !!pathD && pathD.length > 50, pathD ? pathD.length : null);
  await page.selectOption('[data-testid=series-kind]', 'height');
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=series-chart] path.line').length === 2);
  check('root height series (sim and reference)', true);
  // Downloads through the page (fetch + blob with the token)
  for (const [tid, ext] of [
    ['dl-report', '.json'],
    ['dl-csv', '.csv'],
    ['dl-hdf5', '.h5'],
  ]) {
    const [d] = await Promise.all([page.waitForEvent('download'), page.click(`[data-testid=${tid}]`)]);
    const f = path.join(OUT, `submission-${tid}${ext}`);
    await d.saveAs(f);
    const fs = await import('node:fs');
    const size = fs.statSync(f).size;
    check(`download ${tid}`, size > 0, { file: d.suggestedFilename(), size });
  }
  check('organiser buttons on the submission page', (await page.locator('#sub-actions [data-testid=btn-rescore]').count()) === 1);
  // Mark as baseline, see the badge (here and on the leaderboard), then restore.
  const wasBaseline = !!(submission && submission.baseline);
  await page.click('#sub-actions [data-testid=btn-baseline]');
  await page.waitForFunction((b) => (document.querySelector('#sub-summary [data-testid=baseline-badge]') !== null) !== b, wasBaseline);
  check('baseline toggled through the page', true);
  const lb = await pageFetch(`/api/v1/leaderboards/${args.benchmark}`, null);
  const entry = (lb.json.entries || []).find((e) => e.submission_id === SID);
  check('leaderboard reports the baseline flag', entry && entry.baseline === !wasBaseline, entry && entry.baseline);
  await page.click('#sub-actions [data-testid=btn-baseline]');
  await page.waitForFunction((b) => (document.querySelector('#sub-summary [data-testid=baseline-badge]') !== null) === b, wasBaseline);
  check('baseline restored', true);
  await page.click('#sub-actions [data-testid=btn-rescore]');
  await page.waitForFunction(() => {
    const b = document.querySelector('#sub-actions [data-testid=btn-rescore]');
    return b && !b.disabled;
  });
  const rescoreErr = page.locator('#sub-actions .error');
  check('re-score from stored trajectories: no error', (await rescoreErr.count()) === 0, (await rescoreErr.count()) ? await rescoreErr.first().textContent() : undefined);
  const rescored = await page.locator('#sub-actions [data-testid=rescore-done]').textContent({ timeout: 10000 }).catch(() => '');
  check('re-score says how many episodes it re-scored', /Re-scored (1 episode|\d+ episodes) /.test(rescored), rescored);
  const firstScored = await page.$$eval('[data-testid=episode-table] tbody tr', (rows) => {
    for (const r of rows) {
      const steps = Number(r.children[4]?.textContent);
      if (steps > 0) return Number(r.dataset.idx);
    }
    return 0;
  });
  episodeIdx = firstScored;
  await checkNoClipping('submission');
  await shot('submission');
});

await step('pending submission (polling, cancel)', async () => {
  allow([]);
  // Through the test's open public phase when it runs the tested benchmark (no other benchmark
  // could be loaded here): a benchmark that a phase uses is refused outside its phases.
  const where = phaseBenchmark === args.benchmark ? { phase: phaseId } : { benchmark: args.benchmark };
  const r = await pageFetch('/api/v1/submissions', teamToken, { method: 'POST', body: { ...where, agent_name: 'pages.mjs (never runs)' } });
  if (r.status !== 201) {
    check('pending submission created (API)', false, { status: r.status, body: r.json });
    return;
  }
  const pid = r.json.id;
  let polls = 0;
  const onRes = (res) => {
    if (new URL(res.url()).pathname === `/api/v1/submissions/${pid}`) polls++;
  };
  page.on('response', onRes);
  await go(`#/submissions/${pid}`);
  await page.waitForSelector('[data-testid=sub-status]');
  check('pending submission shows PENDING', (await page.textContent('[data-testid=sub-status]')) === 'PENDING');
  check('progress bar shown', (await page.locator('[data-testid=progress]').count()) === 1);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=episode-table] tbody tr').length > 0);
  // The page was gone to: its title names it, and its heading has the focus.
  check('the tab title names the page', (await page.title()) === `Submission ${pid} – MimicArena`, await page.title());
  check('the page heading has the focus after a navigation', await page.evaluate(() => document.activeElement?.tagName === 'H1'));
  // A control of the summary keeps the keyboard's focus while the page polls.
  await page.focus('#sub-summary a[href^="#/benchmarks/"]');
  const start = polls;
  await page.waitForTimeout(4500);
  check('page polls while PENDING (every 2 s)', polls - start >= 2, polls - start);
  check(
    'the focus stays on its control while the page polls',
    await page.evaluate(() => document.activeElement?.matches('#sub-summary a[href^="#/benchmarks/"]')),
    await page.evaluate(() => document.activeElement?.outerHTML?.slice(0, 120)),
  );
  // One failed poll (a server restarting) shows an error, and the page goes on polling: the next
  // answer redraws the head without it.
  let failNext = true;
  const failOnce = async (route) => {
    if (!failNext) return route.continue();
    failNext = false;
    return route.fulfill({ status: 503, contentType: 'application/json', body: JSON.stringify({ error: { code: 'unavailable', message: 'restarting' } }) });
  };
  const subUrl = `**/api/v1/submissions/${pid}`;
  allow([{ re: new RegExp(`^/api/v1/submissions/${pid}$`), status: 503 }]);
  await page.route(subUrl, failOnce);
  await page.waitForSelector('#sub-summary .poll-error');
  await shot('submission-poll-error');
  const recovered = await page
    .waitForFunction(() => !document.querySelector('#sub-summary .poll-error') && document.querySelector('[data-testid=sub-status]'), null, { timeout: 7000 })
    .then(() => true, () => false);
  await page.unroute(subUrl, failOnce);
  allow([]);
  check('a failed poll shows an error and the page goes on polling', recovered);
  check('a submission no agent runs says it waits for its agent', (await page.locator('[data-testid=awaiting-agent]').count()) === 1);
  // The organiser's list says it too (the listing carries the flag).
  await go('#/admin');
  const listed = `[data-testid=submissions-table] tr[data-submission-id="${pid}"]`;
  const inList = await page.waitForSelector(listed, { timeout: 10000 }).then(() => true, () => false);
  check("the organiser's list says it waits for its agent", inList && (await page.locator(`${listed} [data-testid=awaiting-agent-flag]`).count()) === 1, inList && (await page.textContent(listed)));
  await go(`#/submissions/${pid}`);
  await page.waitForSelector('[data-testid=sub-status]');
  check('no downloads while PENDING', (await page.locator('#sub-actions [data-testid^=dl-]').count()) === 0 && (await page.locator('[data-testid=downloads-pending]').count()) === 1);
  check('no replay link on pending episodes', (await page.locator('[data-testid=episode-table] [data-testid=replay-link]').count()) === 0);
  // A pending episode's page says there is nothing to replay yet (and asks for no replay).
  await go(`#/submissions/${pid}/episodes/0`);
  await page.waitForSelector('[data-testid=replay-empty], #replay-section .error');
  check('pending episode: no replay requested, says why', (await page.locator('[data-testid=replay-empty]').count()) === 1, await page.textContent('#replay-section'));
  await go(`#/submissions/${pid}`);
  await page.waitForSelector('#sub-actions [data-testid=btn-cancel]');
  page.once('dialog', (d) => d.accept());
  await page.click('#sub-actions [data-testid=btn-cancel]');
  await page.waitForFunction(() => document.querySelector('[data-testid=sub-status]')?.textContent === 'FAILED');
  check('cancelled through the page (confirmed)', true);
  await page.waitForSelector('[data-testid=failed-episodes]');
  const reasons = await page.textContent('[data-testid=failed-episodes]');
  check('failed episodes listed with their reasons', /cancel/i.test(reasons), reasons.slice(0, 120));
  // None of its episodes ran: one line for them all, and no progress shown for them.
  const unrun = await page.$$eval('[data-testid=never-ran]', (l) => l.map((x) => x.textContent));
  check('episodes that never ran are one line per reason', unrun.length === 1 && /episodes? \(0(–\d+)?\) never ran: .*cancel/i.test(unrun[0]), unrun);
  const progress = await page.textContent('[data-testid=progress]');
  check('the progress bar counts only episodes that ran', /^0 ran \/ \d+ \(0%\); \d+ never ran$/.test(progress.trim()), progress);
  const after = polls;
  await page.waitForTimeout(2500);
  check('polling stops once finished', polls === after, polls - after);
  check(
    'cancelled (FAILED): report, CSV and HDF5 downloads (the HDF5 file holds what it committed)',
    (await page.locator('#sub-actions [data-testid=dl-report]').count()) === 1 && (await page.locator('#sub-actions [data-testid=dl-csv]').count()) === 1 && (await page.locator('#sub-actions [data-testid=dl-hdf5]').count()) === 1,
  );
  page.off('response', onRes);
  await shot('submission-cancelled');
});

await step('episode page (3-D replay)', async () => {
  allow([]);
  await go(`#/submissions/${SID}/episodes/${episodeIdx}`);
  await page.waitForSelector('[data-testid=episode-status]');
  await page.waitForSelector('[data-testid=replay][data-drawn], #replay-section .error', { timeout: 60000 });
  const drawn = await page.getAttribute('[data-testid=replay]', 'data-drawn');
  check('replay drawn (meshes per robot)', Number(drawn) > 10, drawn);
  const px = await canvasPixels();
  check('canvas shows the robots (pixels off the background and grid)', px.robot >= 2000, px);
  check('reference robot drawn (orange pixels)', px.orange >= 500, px.orange);
  const f0 = await page.textContent('[data-testid=replay-frame]');
  const t0 = await page.textContent('[data-testid=replay-time]');
  const max = Number(await page.getAttribute('[data-testid=replay-slider]', 'max'));
  await page.evaluate((v) => {
    const s = document.querySelector('[data-testid=replay-slider]');
    s.value = String(v);
    s.dispatchEvent(new Event('input', { bubbles: true }));
  }, Math.floor(max / 2));
  await page.waitForFunction((f) => document.querySelector('[data-testid=replay-frame]').textContent !== f, f0);
  const f1 = await page.textContent('[data-testid=replay-frame]');
  const t1 = await page.textContent('[data-testid=replay-time]');
  check('scrubbing changes the frame and time', f1 !== f0 && t1 !== t0, { before: [f0, t0], after: [f1, t1] });
  check('body and joint error readouts', /mm$/.test(await page.textContent('[data-testid=replay-body-error]')) && /rad$/.test(await page.textContent('[data-testid=replay-joint-error]')));
  await page.waitForTimeout(200);
  const px1 = await canvasPixels();
  check('canvas still drawn after scrubbing', px1.robot >= 2000, px1.robot);
  // Play for a moment at 2x
  await page.selectOption('[data-testid=replay-speed]', '2');
  await page.click('[data-testid=replay-play]');
  await page.waitForFunction((f) => document.querySelector('[data-testid=replay-frame]').textContent !== f, f1, { timeout: 10000 });
  await page.click('[data-testid=replay-play]');
  check('playing advances frames', true);
  await page.check('[data-testid=replay-overlay]');
  await page.uncheck('[data-testid=replay-follow]');
  await page.waitForTimeout(200);
  const px2 = await canvasPixels();
  check('overlay mode drawn', px2.robot >= 2000, px2.robot);
  await page.uncheck('[data-testid=replay-overlay]');
  await page.check('[data-testid=replay-follow]');
  await page.waitForTimeout(200);
  check('episode metrics table', (await rowCount('[data-testid=episode-metrics]')) > 0);
  // The seed (a u64: a decimal string from the server, a number from older ones) verbatim.
  const res = await pageFetch(`/api/v1/submissions/${encodeURIComponent(SID)}/results`, args.admin);
  const seeds = [...(res.text || '').matchAll(/"seed":\s*("?)(\d+)\1/g)].map((m) => ({ quoted: m[1] === '"', digits: m[2] }));
  const seed = seeds[episodeIdx];
  const props = (await page.textContent('[data-testid=episode-props]')) || '';
  if (seed && (seed.quoted || Number.isSafeInteger(Number(seed.digits)))) check('episode seed shown verbatim', props.includes(seed.digits), { seed, props: props.slice(0, 300) });
  else check('episode seed above 2^53 sent as a number: shown as approximate', !!seed && props.includes('≈'), { seed });
  await page.locator('[data-testid=replay-canvas]').screenshot({ path: path.join(OUT, 'episode-canvas.png') });
  await shot('episode');
});

await step('team token', async () => {
  const role = await setToken(teamToken);
  check('team token recognised', role === 'team', await page.textContent('#whoami'));
});

await step('team page', async () => {
  await go('#/team');
  await page.waitForSelector('[data-testid=submissions-table]');
  check('my submissions list the submission', (await page.locator(`[data-testid=submissions-table] tr[data-submission-id="${SID}"]`).count()) === 1);
  const rowText = await page.textContent(`[data-testid=submissions-table] tr[data-submission-id="${SID}"]`);
  check('the list shows the scored count and the score', /\d+\/\d+ ·/.test(rowText) && /emd \d/.test(rowText), rowText);
  const [d] = await Promise.all([page.waitForEvent('download'), page.click('[data-testid=export-csv]')]);
  const f = path.join(OUT, 'submissions.csv');
  await d.saveAs(f);
  const fs = await import('node:fs');
  const csv = fs.readFileSync(f, 'utf8');
  check('Export CSV downloads the submissions', csv.includes(SID), { file: d.suggestedFilename(), bytes: csv.length });
  await shot('team');
});

await step('a token revoked while the tab holds it', async () => {
  if (!submission) return;
  const t = await pageFetch(`/api/v1/teams/${submission.team_id}/tokens`, args.admin, { method: 'POST', body: { label: 'pages-revoked-in-tab' } });
  const token = t.json && t.json.token;
  check('a second team token issued (API)', t.status === 201 && !!token, t.status);
  if (!token) return;
  const role = await setToken(token);
  check('the tab knows it as a team token', role === 'team', await page.textContent('#whoami'));
  const r = await pageFetch(`/api/v1/teams/${submission.team_id}/tokens/${t.json.token_info.id}`, args.admin, { method: 'DELETE' });
  check('revoked (API)', r.status === 200, r.status);
  // The tab's next request is refused (and the public parts read without it): the header
  // stops naming the team.
  allow([{ re: /^\/api\/v1\//, status: 401 }]);
  await go('#/');
  await page.waitForFunction(() => document.getElementById('whoami')?.dataset.role === 'invalid', null, { timeout: T });
  // Seen: "token rejected"; heard (the box is a live region): the server's reason after it.
  const refusedText = await page.textContent('#whoami');
  const seen = await page.evaluate(() => document.getElementById('whoami').firstChild.textContent);
  check('the header says the token is refused', seen === 'token rejected' && /^token rejected: \S/.test(refusedText), refusedText);
  allow([]);
  await setToken(teamToken);
});

await step('team views (owner, hidden phase, organiser page)', async () => {
  allow([
    { re: /^\/api\/v1\/teams$/, status: 403 },
    { re: new RegExp(`^/api/v1/phases/${privatePhaseId}/leaderboard$`), status: 403 },
  ]);
  await go(`#/submissions/${SID}`);
  await page.waitForSelector('[data-testid=episode-table]');
  check('owner sees the submission', true);
  check('a team on a submission page: the Team tab is lit', (await page.getAttribute('.mainnav a.active', 'data-nav')) === 'team');
  check('no organiser buttons for a team', (await page.locator('[data-testid=btn-rescore]').count()) === 0);
  await go(`#/leaderboards/${args.benchmark}`);
  await page.waitForSelector('[data-testid=leaderboard-table]');
  const own = page.locator(`[data-testid=leaderboard-table] tr[data-submission-id="${SID}"]`);
  check("team: its own leaderboard entry links to its page", (await own.locator('[data-testid=submission-link]').count()) === 1);
  const others = await page.$$eval('[data-testid=leaderboard-table] tbody tr', (rows, team) => rows.filter((r) => r.children[1]?.textContent !== team && r.querySelector('[data-testid=submission-link]')).length, submission && submission.team_name);
  check("team: other teams' entries are not links", others === 0, others);
  // A submission in a private phase: its owner sees the status, no results and no downloads.
  allow([
    { re: /^\/api\/v1\/submissions\/[^/]+\/results$/, status: 403 },
    { re: /^\/api\/v1\/teams$/, status: 403 },
    { re: new RegExp(`^/api/v1/phases/${privatePhaseId}/leaderboard$`), status: 403 },
  ]);
  const hs = await pageFetch('/api/v1/submissions', teamToken, { method: 'POST', body: { phase: privatePhaseId, agent_name: 'pages.mjs (hidden, never runs)' } });
  if (check('submission in the private phase created (API)', hs.status === 201, { status: hs.status, body: hs.json })) {
    await go(`#/submissions/${hs.json.id}`);
    await page.waitForSelector('[data-testid=results-hidden]');
    check('hidden results: no download buttons, says why', (await page.locator('#sub-actions [data-testid^=dl-]').count()) === 0 && (await page.locator('[data-testid=downloads-hidden]').count()) === 1);
    await shot('submission-hidden');
    await pageFetch(`/api/v1/submissions/${hs.json.id}/cancel`, args.admin, { method: 'POST' });
  }
  await go(`#/phases/${privatePhaseId}`);
  await page.waitForSelector('[data-testid=leaderboard-hidden], #leaderboard .error, #leaderboard [data-testid=leaderboard-table]');
  const hidden = await page.locator('[data-testid=leaderboard-hidden]').textContent({ timeout: 3000 }).catch(() => null);
  check('private phase leaderboard hidden from a team, message shown', !!hidden, hidden);
  await shot('phase-private');
  await go('#/admin');
  check('organiser page refuses a team token politely', (await page.locator('[data-testid=need-admin]').count()) === 1);
});

await step('hosted upload (phase page form, submission page)', async () => {
  if (!args.policy || args.policy === 'true' || !args['hosted-benchmark']) return;
  const fs = await import('node:fs');
  const hostedPhase = `ui-test-${stamp}-hosted`;
  const now = Date.now();
  const r = await pageFetch(`/api/v1/challenges/${challengeId}/phases`, args.admin, {
    method: 'POST',
    body: { id: hostedPhase, benchmark: args['hosted-benchmark'], starts_at: new Date(now - 86400000).toISOString(), ends_at: new Date(now + 86400000).toISOString(), hosted_only: true },
  });
  if (!check('hosted-only phase created (API)', r.status === 201, { status: r.status, body: r.json })) return;
  await setToken(teamToken);
  await go(`#/phases/${hostedPhase}`);
  await page.waitForSelector('[data-testid=upload-form]');
  check('phase page: who runs it, hosted only', ((await page.textContent('[data-testid=phase-props]')) || '').includes('hosted only'));
  // A file that cannot run: every problem listed, nothing created.
  allow([{ method: 'POST', re: /^\/api\/v1\/submissions\/hosted$/, status: 422 }]);
  await page.setInputFiles('[data-testid=upload-file]', { name: 'notes.onnx', mimeType: 'application/octet-stream', buffer: Buffer.from('not a model') });
  await page.click('[data-testid=upload-submit]');
  await page.waitForSelector('[data-testid=upload-problems]');
  const problemsText = await page.textContent('[data-testid=upload-problems]');
  check('a refused upload lists its problems, no quota used', /notes\.onnx cannot run here/.test(problemsText) && /not a model/.test(problemsText), problemsText);
  await shot('phase-upload-refused');
  allow([]);
  await page.setInputFiles('[data-testid=upload-file]', { name: 'policy.onnx', mimeType: 'application/octet-stream', buffer: fs.readFileSync(args.policy) });
  await page.fill('[data-testid=upload-agent-name]', 'pages.mjs hosted');
  await page.click('[data-testid=upload-submit]');
  await page.waitForFunction(() => /^#\/submissions\/sub-/.test(location.hash));
  await page.waitForSelector('[data-testid=hosted-policy]');
  check('the upload opens its submission page', ((await page.textContent('[data-testid=hosted-policy]')) || '').includes('policy.onnx'));
  const terms = await rowCount('[data-testid=mapping-terms]');
  check('the mapping lists the policy\'s observation terms', terms >= 5, terms);
  const props = (await page.textContent('[data-testid=mapping-props]')) || '';
  check('the mapping names the convention and the model', props.includes('mjlab') && props.includes('observation values'), props);
  await page.waitForSelector('[data-testid=dl-policy]', { timeout: 120000 });
  const [d] = await Promise.all([page.waitForEvent('download'), page.click('[data-testid=dl-policy]')]);
  const saved = path.join(OUT, 'hosted-policy.onnx');
  await d.saveAs(saved);
  check('the policy downloads as uploaded', fs.readFileSync(saved).equals(fs.readFileSync(args.policy)), d.suggestedFilename());
  await checkNoClipping('submission-hosted');
  await shot('submission-hosted');
  await setToken(args.admin);
});

await step('a refused token keeps the public pages', async () => {
  // The whoami probe and each public read are refused once with the token, then read without.
  allow([{ re: /^\/api\/v1\//, status: 401 }]);
  const role = await setToken('at_not_a_real_token');
  check('refused token shown in the header', role === 'invalid', await page.textContent('#whoami'));
  await go('#/');
  await page.waitForSelector('[data-testid=benchmark-card]');
  check('home still lists the challenges and benchmarks', (await page.locator(`[data-challenge-id="${challengeId}"]`).count()) === 1);
  await go(`#/leaderboards/${args.benchmark}`);
  await page.waitForSelector('[data-testid=leaderboard-table]');
  check('public leaderboard still shown', (await rowCount('[data-testid=leaderboard-table]')) > 0);
  await setToken('');
});

await step('hidden test set (a team)', async () => {
  if (!args['hidden-submission'] || !args['hidden-benchmark'] || !teamToken) return;
  const HID = args['hidden-submission'];
  allow([]);
  await setToken(teamToken);
  await go(`#/submissions/${HID}`);
  await page.waitForSelector('[data-testid=episode-table]');
  await page.waitForSelector('[data-testid=downloads-motions-hidden]');
  check('hidden motions: no report, CSV or trajectory buttons (they would be refused)', (await page.locator('[data-testid=dl-report]').count()) === 0);
  const text = (await page.textContent('#app')) || '';
  check('hidden motions: no "null" on the submission page', !/\bnull\b/.test(text), text.slice(0, 400));
  await shot('submission-hidden-motions');
  await go(`#/leaderboards/${args['hidden-benchmark']}`);
  await page.waitForSelector('[data-testid=leaderboard-table]');
  const row = page.locator(`[data-testid=leaderboard-table] tr[data-submission-id="${HID}"]`);
  const rowText = (await row.textContent()) || '';
  await shot('leaderboard-hidden-motions');
  check('hidden motions: the leaderboard says its time to failure is withheld', rowText.includes('withheld') && (await row.locator('[data-testid=survival-none]').count()) === 0, rowText);
  await setToken('');
});

await step('anonymous views', async () => {
  allow([]);
  await setToken('');
  await go(`#/submissions/${SID}`);
  check('submission page asks for a token', (await page.locator('[data-testid=need-token]').count()) === 1);
  await go(`#/leaderboards/${args.benchmark}`);
  await page.waitForSelector('[data-testid=leaderboard-table]');
  check(
    'anonymous: leaderboard shows submission ids without links to token-only pages',
    (await page.locator('[data-testid=leaderboard-table] [data-testid=submission-link]').count()) === 0 &&
      (await page.locator(`[data-testid=leaderboard-table] tr[data-submission-id="${SID}"] [data-testid=submission-id]`).count()) === 1,
  );
  await shot('leaderboard-anonymous');
  allow([{ re: /^\/api\/v1\/submissions\/[^/]+$/, status: 404 }]);
  await setToken(args.admin);
  await go('#/submissions/sub-does-not-exist');
  await page.waitForSelector('[data-testid=error]');
  check('unknown submission: API message shown', ((await page.textContent('[data-testid=error]')) || '').length > 5);
  allow([]);
  await go('#/no/such/page');
  check('unknown route handled', ((await page.textContent('#app')) || '').includes('not found'));
  await setToken('');
});

currentStep = 'end';
await browser.close();

const failed = checks.filter((c) => !c.ok);
const ok = failed.length === 0 && problems.length === 0;
const summary = {
  ok,
  checks: checks.length,
  passed: checks.length - failed.length,
  failed: failed.map((c) => c.name),
  problems,
  expected_http_errors: seenAllowed.length,
  warnings: warnings.length,
  warning_samples: warnings.slice(0, 5),
  screenshots: screenshots.map((f) => path.basename(f)),
  step_ms: timings,
  out: OUT,
};
writeFileSync(path.join(OUT, 'summary.json'), JSON.stringify({ ...summary, details: checks, warnings }, null, 2));
console.log(JSON.stringify(summary));
process.exit(ok ? 0 : 1);
