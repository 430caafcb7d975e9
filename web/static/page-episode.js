// #/submissions/{id}/episodes/{idx}: 3-D replay, status, reason and metrics of one episode.

import { api, getToken } from './api.js';
import { loadBenchmarkInfo, metricInfoMap } from './leaderboard.js';
import { hasTrajectory, orderedMetrics, resultsHiddenNotice, tokenPrompt } from './page-submission.js';
import { attemptsText, badge, clear, defList, enc, errorBox, fmtNum, fmtSeed, h, loading, metricLabel, motionName, notice, sortableTable } from './ui.js';

let robotCache = null;

// The robot is shared by every episode page, so it is fetched without a page's abort signal:
// leaving a page while it loads must not hand the next page an aborted request.
async function loadRobot() {
  if (!robotCache) {
    robotCache = api('robot').catch((e) => {
      robotCache = null;
      throw e;
    });
  }
  return robotCache;
}

export async function episodePage(root, { id, idx }, ctx) {
  const n = Number(idx);
  root.append(
    h(
      'p.crumbs',
      h('a', { href: '#/' }, 'Home'),
      ' / ',
      h('a', { href: `#/submissions/${enc(id)}`, 'data-testid': 'back-to-submission' }, h('span.mono', id)),
      ` / episode ${idx}`,
    ),
  );
  const title = h('h1', { 'data-testid': 'episode-title' }, `Episode ${idx}`);
  root.append(title);
  if (!getToken()) {
    root.append(tokenPrompt('An episode page'));
    return;
  }
  const infoSec = h('section.card#episode-info', loading());
  const viewSec = h('section.card#replay-section', h('h2', '3-D replay'), loading('Loading the robot and the trajectory…'));
  const metricsSec = h('section.card#episode-metrics-section');
  root.append(infoSec, viewSec, metricsSec);

  // While a private phase hides the results from the team, GET …/results and the replay answer
  // 403 hidden: the submission says so (`results_hidden`), so ask it first and explain.
  let sub;
  try {
    sub = await api(`submissions/${enc(id)}`, { signal: ctx.signal });
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    if (!ctx.live()) return;
    clear(infoSec).append(errorBox(e));
    viewSec.remove();
    return;
  }
  if (!ctx.live()) return;
  if (sub.results_hidden) {
    const note = await resultsHiddenNotice(sub, ctx.signal);
    if (!ctx.live()) return;
    clear(infoSec).append(note);
    viewSec.remove();
    return;
  }

  const resultsP = api(`submissions/${enc(id)}/results`, { signal: ctx.signal });
  const robotP = loadRobot();
  // Keep rejections handled even if an earlier await throws.
  for (const p of [resultsP, robotP]) p.catch(() => {});

  // --- info ---
  let ep = null;
  let resultsOk = false;
  try {
    const res = await resultsP;
    resultsOk = true;
    if (!ctx.live()) return;
    ep = (res.episodes || []).find((e) => e.idx === n) || null;
    const sub = res.submission || {};
    const bench = await loadBenchmarkInfo(sub.benchmark, ctx.signal);
    if (!ctx.live()) return;
    clear(infoSec);
    if (!ep) {
      infoSec.append(errorBox({ message: `submission ${id} has no episode ${idx}` }));
    } else {
      title.append(' ', h('span.muted', `· ${motionName(ep.motion)}`), ' ', badge(ep.status, null, 'episode-status'));
      const info = metricInfoMap(bench);
      const present = Object.keys(ep.metrics || {});
      const { all, ranking } = orderedMetrics(bench, present);
      const total = (res.episodes || []).length;
      infoSec.append(
        h(
          'div.episode-nav',
          n > 0 ? h('a', { href: `#/submissions/${enc(id)}/episodes/${n - 1}` }, '← previous episode') : h('span'),
          n < total - 1 ? h('a', { href: `#/submissions/${enc(id)}/episodes/${n + 1}` }, 'next episode →') : h('span'),
        ),
        defList(
          [
            ['Submission', h('a', { href: `#/submissions/${enc(id)}` }, id)],
            ['Team / agent', `${sub.team_name || '—'} / ${sub.agent_name || '—'}`],
            ['Benchmark', sub.benchmark ? h('a', { href: `#/benchmarks/${enc(sub.benchmark)}` }, sub.benchmark) : '—'],
            ['Motion', ep.motion === null || ep.motion === undefined ? 'hidden (a test set)' : `${ep.motion} (${ep.category || '—'})`],
            ['Status', badge(ep.status)],
            ['Reason', ep.reason ? h('span.reason', { 'data-testid': 'episode-reason' }, ep.reason) : h('span.muted', '—')],
            ['Steps', String(ep.steps ?? '—')],
            // Runs the server lost (a crash, an error, a failed store) or gave back (a stop, a
            // claim that never started) are not the agent's.
            ['Attempts', attemptsText(ep)],
            ['Clip window', `${fmtNum(ep.start_s)} s + ${fmtNum(ep.duration_s)} s`],
            ['Seed / DR level', [fmtSeed(ep.seed), ` / ${ep.dr_level ?? '—'}`]],
          ],
          'episode-props',
        ),
        ep.status === 'FAILED' || ep.status === 'TIMEOUT' ? errorBox({ message: ep.reason || 'no reason given' }, `Episode ${ep.status.toLowerCase()}`) : '',
      );
      metricsSec.append(
        h('h2', 'Metrics'),
        all.length
          ? sortableTable(
              [
                { key: 'name', label: 'Metric', value: (r) => all.indexOf(r.name), render: (r) => [metricLabel(r.name, info[r.name]), ranking.includes(r.name) ? h('span.rank-dot', { title: 'used for ranking' }, ' ●') : null] },
                { key: 'value', label: 'Value', numeric: true, render: (r) => fmtNum(r.value) },
                { key: 'units', label: 'Units', render: (r) => (info[r.name] || {}).units || '—' },
              ],
              all.map((name) => ({ name, value: ep.metrics[name] })),
              { testid: 'episode-metrics' },
            )
          : h('p.muted', 'No metrics (the episode was not scored).'),
      );
    }
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    if (!ctx.live()) return;
    clear(infoSec).append(e.code === 'hidden' ? notice(e.message, 'warn', 'results-hidden') : errorBox(e));
  }

  // --- replay ---
  if (!ctx.live()) return;
  if (!resultsOk) {
    // The replay is refused for the same reason as the results (shown above).
    viewSec.remove();
    return;
  }
  if (!ep || !hasTrajectory(ep)) {
    // Nothing to ask the server for: a pending or running episode has no stored trajectory yet.
    viewSec.querySelector('.loading')?.remove();
    viewSec.append(
      notice(
        !ep
          ? 'No such episode.'
          : ep.motion === null && ep.steps === null
            ? 'No replay: the motions of this benchmark are hidden (a test set).'
            : ep.status === 'PENDING' || ep.status === 'RUNNING'
            ? `No replay yet: the episode is ${ep.status.toLowerCase()}; its trajectory is stored when it ends.`
            : 'No replay: this episode recorded no step.',
        'info',
        'replay-empty',
      ),
    );
    return;
  }
  let robot;
  let replay;
  try {
    [robot, replay] = await Promise.all([robotP, api(`submissions/${enc(id)}/episodes/${enc(idx)}/replay`, { signal: ctx.signal })]);
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    if (!ctx.live()) return;
    viewSec.querySelector('.loading')?.remove();
    viewSec.append(errorBox(e, 'The replay is not available'));
    return;
  }
  if (!ctx.live()) return;
  viewSec.querySelector('.loading')?.remove();
  if (!replay.frames) {
    viewSec.append(notice('This episode has no recorded frames.', 'info', 'replay-empty'));
    return;
  }
  const { createReplay } = await import('./replay3d.js');
  if (!ctx.live()) return;
  buildViewer(viewSec, robot, replay, ctx, createReplay);
}

function buildViewer(sec, robot, replay, ctx, createReplay) {
  const stage = h('div.replay-stage#replay', { 'data-testid': 'replay' });
  const playBtn = h('button#replay-play', { type: 'button', 'data-testid': 'replay-play' }, '▶ Play');
  const slider = h('input#replay-slider', {
    type: 'range',
    min: '0',
    max: String(Math.max(0, replay.frames - 1)),
    step: '1',
    value: '0',
    'aria-label': 'frame',
    'data-testid': 'replay-slider',
  });
  const speed = h(
    'select#replay-speed',
    { 'data-testid': 'replay-speed', 'aria-label': 'speed' },
    ['0.25', '0.5', '1', '2'].map((s) => h('option', { value: s, selected: s === '1' }, `${s}×`)),
  );
  const overlay = h('input#replay-overlay', { type: 'checkbox', 'data-testid': 'replay-overlay' });
  const follow = h('input#replay-follow', { type: 'checkbox', checked: true, 'data-testid': 'replay-follow' });
  const frameLabel = h('span.frame-label#replay-frame', { 'data-testid': 'replay-frame' }, '');
  const timeLabel = h('span#replay-time', { 'data-testid': 'replay-time' }, '');
  const errLabel = h('span#replay-body-error', { 'data-testid': 'replay-body-error' }, '');
  const jointLabel = h('span#replay-joint-error', { 'data-testid': 'replay-joint-error' }, '');

  sec.append(
    h(
      'p.legend-row',
      h('span.swatch.sim'),
      ' simulated robot  ',
      h('span.swatch.ref'),
      ' reference motion',
      h('span.muted#replay-keys', ' · drag to orbit, scroll to zoom, right-drag to pan; or, with the view focused (Tab), Shift+arrows to orbit, + and − to zoom, arrows to pan'),
    ),
    stage,
    h(
      'div.replay-controls',
      playBtn,
      slider,
      h('label', 'speed ', speed),
      h('label.inline', overlay, ' overlay'),
      h('label.inline', follow, ' follow pelvis'),
    ),
    h(
      'div.replay-readout',
      h('div', h('span.k', 'frame '), frameLabel),
      h('div', h('span.k', 'time '), timeLabel),
      h('div', h('span.k', 'body error '), errLabel),
      h('div', h('span.k', 'joint error '), jointLabel),
    ),
  );

  let viewer;
  try {
    viewer = createReplay(stage, robot, replay);
  } catch (e) {
    stage.append(errorBox(e, '3-D view'));
    return;
  }
  ctx.onCleanup(() => viewer.dispose());

  const be = replay.body_error_mm || [];
  const je = replay.joint_error_rad || [];
  const show = (f, t, ev) => {
    frameLabel.textContent = `${f + 1} / ${viewer.frames}`;
    // The slider speaks the frame's place and error, not a bare index.
    slider.setAttribute('aria-valuetext', `frame ${f + 1} of ${viewer.frames}, ${(t ?? f / viewer.fps).toFixed(2)} s${Number.isFinite(be[f]) ? `, body error ${be[f].toFixed(1)} mm` : ''}`);
    frameLabel.dataset.frame = String(f);
    timeLabel.textContent = `${(t ?? f / viewer.fps).toFixed(2)} s`;
    errLabel.textContent = Number.isFinite(be[f]) ? `${be[f].toFixed(1)} mm` : '—';
    jointLabel.textContent = Number.isFinite(je[f]) ? `${je[f].toFixed(3)} rad` : '—';
    if (Number(slider.value) !== f) slider.value = String(f);
    if (ev === 'ended') playBtn.textContent = '▶ Play';
  };
  viewer.onFrame(show);
  show(viewer.frame, viewer.times[viewer.frame]);

  playBtn.addEventListener('click', () => {
    const on = viewer.toggle();
    playBtn.textContent = on ? '❚❚ Pause' : '▶ Play';
  });
  slider.addEventListener('input', () => {
    viewer.pause();
    playBtn.textContent = '▶ Play';
    viewer.setFrame(Number(slider.value));
  });
  speed.addEventListener('change', () => viewer.setSpeed(Number(speed.value)));
  overlay.addEventListener('change', () => viewer.setMode(overlay.checked ? 'overlay' : 'side'));
  follow.addEventListener('change', () => viewer.setFollow(follow.checked));
  if (!viewer.hasRef) sec.append(h('p.muted.small', 'No reference motion in this replay.'));
  // Mark the stage drawn after the first frames are on screen (tests wait for this).
  requestAnimationFrame(() =>
    requestAnimationFrame(() => {
      if (ctx.live()) stage.dataset.drawn = String(viewer.renderNow());
    }),
  );
}
