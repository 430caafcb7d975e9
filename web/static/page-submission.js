// #/submissions/{id}: status, progress (polled), statistics, episodes, plots, downloads,
// organiser actions.

import { api, download, getToken, whoami } from './api.js';
import { barChart, lineChart } from './charts.js';
import { loadBenchmarkInfo, metricInfoMap } from './leaderboard.js';
import {
  actionButton,
  attemptsText,
  badge,
  motionName,
  clear,
  defList,
  enc,
  errorBox,
  fmtBytes,
  fmtDuration,
  fmtNum,
  h,
  focusWithin,
  loading,
  metricLabel,
  notice,
  plural,
  refocus,
  sortableTable,
  timeEl,
} from './ui.js';

const POLL_MS = 2000;
const ACTIVE = new Set(['PENDING', 'RUNNING']);

/** Whether an episode has a stored trajectory to replay or plot: it ended and recorded steps. */
export function hasTrajectory(e) {
  return !!e && !ACTIVE.has(e.status) && (e.steps || 0) > 0;
}

export function tokenPrompt(what) {
  return notice(
    `${what} needs the owning team's token or the admin token: paste it in the token box at the top right (it is kept for this browser tab only).`,
    'warn',
    'need-token',
  );
}

/**
 * Why a team sees no results: its private phase hides them until it ends. The submission says
 * so (`results_hidden`), so the pages show this instead of asking GET …/results, which would
 * answer 403 hidden. The phase (public to read) gives the end time the refusal would name.
 */
export async function resultsHiddenNotice(sub, signal) {
  const phase = sub.phase ? await api(`phases/${enc(sub.phase)}`, { signal }).catch(() => null) : null;
  return notice(
    [
      `The results of submission ${sub.id} are hidden until private phase `,
      sub.phase ? h('a', { href: `#/phases/${enc(sub.phase)}` }, sub.phase) : 'its phase',
      ' ends',
      phase && phase.ends_at != null ? [' (', timeEl(phase.ends_at), ')'] : '',
      '.',
    ],
    'warn',
    'results-hidden',
  );
}

/** Ranking metrics first (success, primary, tie-breakers), then the rest as listed. */
export function orderedMetrics(bench, present) {
  const r = (bench && bench.ranking) || {};
  // The leaderboard's order: the success rule, its failure time, the primary metric, the tie
  // breakers; then the other success rule and the body-position errors (docs/metrics.md).
  const ranking = [r.success, r.survival, r.primary, ...(r.tie_breakers || [])].filter(Boolean);
  const other = r.success === 'mjlab_success' ? 'success' : 'mjlab_success';
  const preferred = [other, 'mpjpe_g', 'mpjpe_rr'];
  const listed = (bench && bench.metrics && bench.metrics.list) || [];
  const out = [];
  for (const m of [...ranking, ...preferred, ...listed, ...present]) if (!out.includes(m) && present.includes(m)) out.push(m);
  return { all: out, ranking: ranking.filter((m) => present.includes(m)) };
}

export async function submissionPage(root, { id }, ctx) {
  root.append(
    h('p.crumbs', h('a', { href: '#/' }, 'Home'), ' / ', h('a', { href: '#/team' }, 'submissions'), ' / ', h('span.mono', id)),
    h('h1', 'Submission ', h('span.mono', id)),
  );
  if (!getToken()) {
    root.append(tokenPrompt('A submission page'));
    return;
  }
  const head = h('section.card#sub-summary', loading());
  root.append(head);
  let sub;
  try {
    sub = await api(`submissions/${enc(id)}`, { signal: ctx.signal });
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    clear(head).append(errorBox(e));
    return;
  }
  if (!ctx.live()) return;

  const [bench, who] = await Promise.all([loadBenchmarkInfo(sub.benchmark, ctx.signal), whoami()]);
  if (!ctx.live()) return;
  const info = metricInfoMap(bench);
  const isAdmin = who && who.role === 'admin';

  const actions = h('section.card#sub-actions');
  const results = h('div#sub-results');
  // Status and progress as they change, for screen readers (the card is drawn, not spoken).
  const live = h('p.sr-only', { role: 'status', 'data-testid': 'sub-live' });
  head.after(live);
  // A hosted submission's mapping does not change: drawn once, outside the refreshed head.
  const mapping = sub.hosted && sub.hosted.mapping && sub.hosted.mapping.terms ? mappingCard(sub.hosted.mapping) : '';
  root.append(mapping, actions, results);

  let lastKey = null;
  let timer = null;
  const state = { metric: null, episode: null, allMetrics: false };

  // Drawn again only when the submission changed, keeping the keyboard's place: a card rebuilt
  // at every poll threw the focus (and a screen reader's place) away every 2 s.
  let headKey = null;
  function renderHead() {
    const key = JSON.stringify(sub);
    if (key === headKey) return;
    headKey = key;
    const focused = focusWithin(head);
    drawHead();
    refocus(head, focused);
  }

  function drawHead() {
    clear(head);
    const p = sub.progress || {};
    const total = sub.episodes_total || 0;
    const done = p.finished ?? 0;
    // Episodes that ended without ever running (their submission was cancelled or abandoned
    // first) are not progress: the bar shows those that ran.
    const neverRan = p.never_ran ?? 0;
    const ran = done - neverRan;
    const pct = total ? Math.round((100 * ran) / total) : 0;
    const progressText = neverRan ? `${ran} ran / ${total} (${pct}%); ${neverRan} never ran` : `${done} / ${total} (${pct}%)`;
    head.append(
      h(
        'div.head-row',
        badge(sub.status, null, 'sub-status'),
        sub.baseline ? [' ', badge('baseline', 'teal', 'baseline-badge')] : null,
        h('span.muted', ` ${sub.team_name || `team ${sub.team_id}`} · ${sub.agent_name || 'unnamed agent'}`),
      ),
      defList(
        [
          ['Team', sub.team_name || String(sub.team_id)],
          ['Benchmark', h('a', { href: `#/benchmarks/${enc(sub.benchmark)}` }, sub.benchmark)],
          ['Phase', sub.phase ? h('a', { href: `#/phases/${enc(sub.phase)}` }, sub.phase) : h('span.muted', 'none (open benchmark submission)')],
          ['Agent', agentCell(sub)],
          ...(sub.hosted ? [['Policy', hostedCell(sub)]] : []),
          ['Sessions', sessionsCell(sub)],
          ['Created', timeEl(sub.created_at)],
          ['Started', timeEl(sub.started_at)],
          ['Finished', timeEl(sub.finished_at)],
          [
            'Episodes',
            `${done} of ${total} finished${neverRan ? ` (${neverRan} of them never ran: the submission ended first)` : ''}${p.running ? `, ${p.running} running` : ''}${p.pending ? `, ${p.pending} pending` : ''}`,
          ],
        ],
        'sub-props',
      ),
      sub.error ? errorBox({ message: sub.error }, 'Submission error') : '',
      h(
        'div.progress',
        {
          role: 'progressbar',
          'aria-label': 'Episodes run',
          'aria-valuemin': '0',
          'aria-valuemax': String(total),
          'aria-valuenow': String(ran),
          'aria-valuetext': progressText,
          'data-testid': 'progress',
        },
        h('div.progress-bar', { style: { width: `${pct}%` }, class: ACTIVE.has(sub.status) ? 'active' : '' }),
        h('span.progress-label', h('span', progressText)),
      ),
      ACTIVE.has(sub.status) && sub.awaiting_agent
        ? notice(
            [
              'Waiting for the agent to reconnect: no agent is running this submission now. Resume it with the same submission id ',
              h('code', `--submission-id ${sub.id}`),
              ' (arena-agent) or ',
              h('code', `submission_id = "${sub.id}"`),
              ' (SDKs); only its unfinished episodes run.',
              sub.idle_expiry_s ? ` Unless an agent runs it, it ends as FAILED (abandoned) ${fmtNum(sub.idle_expiry_s / 3600)} h after its last activity.` : '',
            ],
            'warn',
            'awaiting-agent',
          )
        : ACTIVE.has(sub.status) && sub.awaiting_hosted_place
          ? notice(
              'Queued: the server runs its uploaded policy once one of its places for hosted runs is free (it looks for queued uploads every few seconds).',
              'info',
              'awaiting-hosted-place',
            )
          : ACTIVE.has(sub.status)
            ? h('p.muted.small', 'Updating every 2 s while the submission runs.')
            : '',
    );
  }

  // Whether the results (and so every download) are hidden from this token: a private phase
  // that has not ended, as GET …/results answered.
  let resultsHidden = false;
  const actionsKeyNow = () => `${sub.status}/${!!sub.baseline}/${resultsHidden}`;
  let actionsKey = null;
  function renderActions() {
    actionsKey = actionsKeyNow();
    clear(actions);
    const err = h('div.inline-error');
    const dl = (label, path, file, testid) =>
      actionButton(label, { 'data-testid': testid, class: 'secondary' }, async (btn) => {
        const r = await download(path, file);
        btn.title = `${r.filename}, ${fmtBytes(r.size)}`;
      }, err);
    actions.append(h('h2', 'Downloads'));
    if (resultsHidden) {
      actions.append(h('p.muted', { 'data-testid': 'downloads-hidden' }, 'No downloads while the results are hidden (a private phase that has not ended).'));
    } else if (bench && bench.motions_hidden && !ACTIVE.has(sub.status)) {
      // The report, episode CSV and trajectories name the motions: refused (403 hidden).
      actions.append(h('p.muted', { 'data-testid': 'downloads-motions-hidden' }, `No report, episode CSV or trajectories: the motions are hidden (${bench.motions_hidden}). The scores are above.`));
      if (sub.hosted) {
        actions.append(h('div.button-row', dl('Policy (ONNX)', `/api/v1/submissions/${enc(id)}/policy`, sub.hosted.file_name || `${id}.onnx`, 'dl-policy')));
      }
    } else if (ACTIVE.has(sub.status)) {
      actions.append(h('p.muted', { 'data-testid': 'downloads-pending' }, `Downloads appear once the submission has finished (it is ${sub.status.toLowerCase()}).`));
    } else {
      actions.append(
        h(
          'div.button-row',
          dl('Report (JSON)', `/api/v1/submissions/${enc(id)}/report`, `${id}.json`, 'dl-report'),
          dl('Episodes (CSV)', `/api/v1/submissions/${enc(id)}/episodes.csv`, `${id}-episodes.csv`, 'dl-csv'),
          // The merged HDF5 file is written when the submission ends: completed, or failed
          // (cancelled, abandoned) with what it committed.
          sub.status === 'COMPLETED' || sub.status === 'FAILED' ? dl('Trajectories (HDF5)', `/api/v1/submissions/${enc(id)}/trajectories`, `${id}.h5`, 'dl-hdf5') : null,
          sub.hosted ? dl('Policy (ONNX)', `/api/v1/submissions/${enc(id)}/policy`, sub.hosted.file_name || `${id}.onnx`, 'dl-policy') : null,
        ),
      );
    }
    if (isAdmin) {
      actions.append(h('h2', 'Organiser actions'), adminButtons(sub, err, reloadAll, { cancelConfirm: true }));
    }
    actions.append(err);
  }

  // After an organiser's action: the results again even where the status and count did not
  // move (a re-score changes the metrics alone).
  function reloadAll() {
    lastKey = null;
    return refresh();
  }

  // Polls that failed in a row: the next waits twice as long (up to 30 s).
  let failures = 0;
  const delay = () => Math.min(30000, POLL_MS * 2 ** failures);

  async function refresh() {
    try {
      sub = await api(`submissions/${enc(id)}`, { signal: ctx.signal });
    } catch (e) {
      if (e && e.name === 'AbortError') return;
      if (!ctx.live()) return;
      failures += 1;
      head.querySelector('.poll-error')?.remove();
      head.append(h('div.poll-error', errorBox(e, `Update failed (trying again in ${delay() / 1000} s)`)));
      // A server restarting or a network blip must not freeze the page: keep polling.
      schedule();
      return;
    }
    if (!ctx.live()) return;
    failures = 0;
    head.querySelector('.poll-error')?.remove();
    renderHead();
    const key = `${sub.status}/${(sub.progress || {}).finished}`;
    if (key !== lastKey) {
      // Said to screen readers when it moves (not at the page's first drawing).
      if (lastKey !== null) live.textContent = `Submission ${sub.status.toLowerCase()}: ${(sub.progress || {}).finished ?? 0} of ${sub.episodes_total || 0} episodes finished.`;
      lastKey = key;
      const focused = focusWithin(results);
      await loadResults();
      if (!ctx.live()) return;
      refocus(results, focused);
    }
    if (actionsKeyNow() !== actionsKey) renderActions();
    schedule();
  }

  // A tab in the background does not poll: it polls again when it is looked at.
  const whenShown = () => {
    if (ctx.live() && !document.hidden) refresh();
  };
  function schedule() {
    clearTimeout(timer);
    document.removeEventListener('visibilitychange', whenShown);
    if (!ACTIVE.has(sub.status) || !ctx.live()) return;
    timer = setTimeout(() => {
      if (document.hidden) document.addEventListener('visibilitychange', whenShown);
      else refresh();
    }, delay());
  }
  ctx.onCleanup(() => {
    clearTimeout(timer);
    document.removeEventListener('visibilitychange', whenShown);
  });

  async function loadResults() {
    if (sub.results_hidden) {
      resultsHidden = true;
      const note = await resultsHiddenNotice(sub, ctx.signal);
      if (!ctx.live()) return;
      clear(results).append(note);
      return;
    }
    let res;
    try {
      res = await api(`submissions/${enc(id)}/results`, { signal: ctx.signal });
    } catch (e) {
      if (e && e.name === 'AbortError') return;
      if (!ctx.live()) return;
      resultsHidden = e.code === 'hidden';
      clear(results).append(
        e.code === 'hidden' ? notice(e.message, 'warn', 'results-hidden') : h('section.card', h('h2', 'Results'), errorBox(e)),
      );
      return;
    }
    if (!ctx.live()) return;
    resultsHidden = false;
    clear(results);
    renderResults(results, res, { id, bench, info, state, status: sub.status });
  }

  renderHead();
  lastKey = `${sub.status}/${(sub.progress || {}).finished}`;
  await loadResults();
  if (!ctx.live()) return;
  renderActions();
  schedule();
}

/**
 * Baseline / re-score / cancel buttons (admin token). `after` runs after a success; `compact`
 * gives short labels (the full ones as tooltips) for a table cell.
 */
export function adminButtons(sub, errEl, after, { cancelConfirm = true, compact = false } = {}) {
  const row = h(compact ? 'div.button-row.compact' : 'div.button-row');
  row.append(
    actionButton(
      sub.baseline ? 'Unmark baseline' : compact ? 'Mark baseline' : 'Mark as baseline',
      {
        'data-testid': 'btn-baseline',
        class: 'secondary',
        title: sub.baseline ? 'Remove the baseline badge' : "Mark as a baseline: a badge on the leaderboards (the organisers' reference agent)",
      },
      async () => {
        await api(`submissions/${enc(sub.id)}`, { method: 'PATCH', body: { baseline: !sub.baseline } });
        await after();
      },
      errEl,
    ),
    actionButton(
      compact ? 'Re-score' : 'Re-score from stored trajectories',
      {
        'data-testid': 'btn-rescore',
        class: 'secondary',
        // The server re-scores only a COMPLETED submission (409 otherwise).
        disabled: sub.status !== 'COMPLETED',
        title: sub.status === 'COMPLETED' ? 'Re-score: recompute every metric from the stored trajectories' : 'Only a COMPLETED submission can be re-scored',
      },
      async () => {
        const done = await api(`submissions/${enc(sub.id)}/rescore`, { method: 'POST' });
        await after();
        const n = done && done.rescored_episodes;
        errEl.appendChild(h('div.notice', { 'data-testid': 'rescore-done' }, `Re-scored ${n == null ? 'the episodes' : plural(n, 'episode')} from the stored trajectories.`));
      },
      errEl,
    ),
  );
  if (ACTIVE.has(sub.status)) {
    row.append(
      actionButton(
        'Cancel',
        { 'data-testid': 'btn-cancel', class: 'danger', title: 'Cancel: its unfinished episodes will not run' },
        async () => {
          if (cancelConfirm && !window.confirm(`Cancel submission ${sub.id}? Its unfinished episodes will not run.`)) return;
          await api(`submissions/${enc(sub.id)}/cancel`, { method: 'POST' });
          await after();
        },
        errEl,
      ),
    );
  }
  return row;
}

function renderResults(root, res, { id, bench, info, state, status }) {
  // "yet" only while episodes may still come: a finished submission gets nothing more.
  const yet = ACTIVE.has(status) ? ' yet' : '';
  const episodes = res.episodes || [];
  const agg = res.aggregated || {};
  const present = [...new Set([...Object.keys(agg), ...episodes.flatMap((e) => Object.keys(e.metrics || {}))])];
  const { all, ranking } = orderedMetrics(bench, present);

  // Failed / timed-out episodes first: they matter most.
  // Episodes that never ran (the submission was cancelled or abandoned first) go in one line
  // per reason: a cancelled run of hundreds listed each the same.
  const neverRan = (e) => e.status === 'FAILED' && e.attempts === 0;
  const bad = episodes.filter((e) => (e.status === 'FAILED' || e.status === 'TIMEOUT') && !neverRan(e));
  const unrun = episodes.filter(neverRan);
  const fell = episodes.filter((e) => e.status === 'FELL');
  const failedList = res.failed_episodes || [];
  if (bad.length || unrun.length || failedList.length || fell.length) {
    const box = h('section.card.alert-card#failed', { 'data-testid': 'failed-episodes' }, h('h2', 'Failed, timed-out and fallen episodes'));
    const rows = bad.length || unrun.length
      ? bad.map((e) => ({ idx: e.idx, motion: e.motion, status: e.status, reason: e.reason }))
      : failedList.map((f) => ({ idx: null, id: f.episode_id, motion: f.motion, status: 'FAILED', reason: f.reason }));
    for (const e of fell) rows.push({ idx: e.idx, motion: e.motion, status: e.status, reason: e.reason || 'fell (the fall rule ended the episode)' });
    const byReason = new Map();
    for (const e of unrun) {
      const reason = e.reason || 'no reason given';
      if (!byReason.has(reason)) byReason.set(reason, []);
      byReason.get(reason).push(e.idx);
    }
    box.append(
      h(
        'ul.failures',
        rows.map((r) =>
          h(
            'li',
            badge(r.status),
            ' ',
            r.idx !== null ? h('a', { href: `#/submissions/${enc(id)}/episodes/${r.idx}` }, `episode ${r.idx}`) : h('span.mono', r.id),
            ` (${motionName(r.motion)}): `,
            h('span.reason', r.reason || 'no reason given'),
          ),
        ),
        [...byReason].map(([reason, idxs]) =>
          h('li', { 'data-testid': 'never-ran' }, badge('FAILED'), ` ${plural(idxs.length, 'episode')} (${indexRanges(idxs)}) never ran: `, h('span.reason', reason)),
        ),
      ),
    );
    root.append(box);
  }

  // Aggregated statistics
  const stats = h('section.card#stats', h('h2', 'Aggregated statistics'));
  const aggRows = all.filter((m) => agg[m]).map((m) => ({ metric: m, ...agg[m] }));
  const scored = episodes.filter((e) => e.status === 'COMPLETED' || e.status === 'FELL').length;
  const unscored = episodes.filter((e) => e.status === 'FAILED' || e.status === 'TIMEOUT').length;
  const unscoredUnrun = episodes.filter(neverRan).length;
  if (episodes.length) {
    // Every mean says what it is over (docs/metrics.md): the scored episodes, not the failed ones.
    stats.append(
      h(
        'p.muted',
        { 'data-testid': 'stats-over' },
        `Over the ${scored} scored of ${plural(episodes.length, 'episode')}` +
          // Only a COMPLETED submission is on a leaderboard (a cancelled or abandoned one,
          // FAILED, never is), where its failed episodes count as not successful.
          (unscored
            ? `; ${unscored} failed unscored${unscoredUnrun ? ` (${unscoredUnrun} of them never ran)` : ''} ${unscored === 1 ? 'is' : 'are'} left out${status === 'COMPLETED' ? ' (the leaderboard counts them as failures)' : ''}.`
            : '.') +
          " Scoring stops where the success rule breaks (mjlab's metrics at mjlab's own termination).",
      ),
    );
  }
  if (!aggRows.length) stats.append(h('p.muted', `No scored episode${yet}.`));
  else {
    const q = (k, label) => ({ key: k, label, numeric: true, render: (r) => fmtNum(r[k]) });
    // A spread of identical values is 0, not the rounding residue of its computation (1e-16).
    const spread = {
      ...q('std', 'Std'),
      render: (r) => fmtNum(Number.isFinite(r.std) && Math.abs(r.std) <= 1e-9 * Math.max(1, Math.abs(r.mean)) ? 0 : r.std),
    };
    stats.append(
      sortableTable(
        [
          {
            key: 'metric',
            label: 'Metric',
            value: (r) => all.indexOf(r.metric),
            render: (r) => [metricLabel(r.metric, info[r.metric]), ranking.includes(r.metric) ? h('span.rank-dot', { title: 'used for ranking' }, ' ●') : null],
          },
          q('mean', 'Mean'),
          spread,
          q('p10', 'p10'),
          q('p50', 'p50'),
          q('p90', 'p90'),
          q('min', 'Min'),
          q('max', 'Max'),
          q('count', 'n'),
        ],
        aggRows,
        { testid: 'stats-table' },
      ),
    );
  }
  root.append(stats);

  // Per-episode table
  const epSec = h('section.card#episodes', h('h2', 'Episodes'));
  const toggle = h('label.inline', h('input', { type: 'checkbox', checked: state.allMetrics }), ' show every metric');
  const tableHolder = h('div');
  const drawTable = () => {
    clear(tableHolder);
    // By default the ranking metrics and what reads best beside them, so the table fits 1280 px.
    const shown = state.allMetrics ? all : all.slice(0, Math.max(ranking.length, Math.min(4, all.length)));
    const cols = [
      { key: 'idx', label: '#', numeric: true },
      {
        key: 'motion',
        label: 'Motion',
        render: (e) =>
          e.motion
            ? h('a', { href: `#/submissions/${enc(id)}/episodes/${e.idx}`, 'data-testid': 'episode-link' }, e.motion)
            : h('span.muted', { title: 'hidden: this benchmark is a hidden test set' }, '—'),
      },
      // The agent column only where sessions ran different agents (the submission's head names
      // the agent otherwise); the motion's category is on its episode page.
      ...(new Set(episodes.map((e) => e.agent_name || '')).size > 1 ? [{ key: 'agent_name', label: 'Agent', render: (e) => e.agent_name || '—' }] : []),
      { key: 'status', label: 'Status', render: (e) => badge(e.status) },
      { key: 'steps', label: 'Steps', numeric: true },
      { key: 'duration_s', label: 'Clip (s)', numeric: true, render: (e) => fmtNum(e.duration_s) },
      ...shown.map((m) => ({
        key: `m:${m}`,
        label: metricLabel(m, info[m]),
        numeric: true,
        value: (e) => (e.metrics || {})[m] ?? null,
        render: (e) => fmtNum((e.metrics || {})[m]),
      })),
      // The runs the server lost or gave back are counted apart, as on the episode page.
      { key: 'attempts', label: 'Attempts', numeric: true, render: (e) => attemptsText(e) },
      {
        key: 'replay',
        label: '',
        sortable: false,
        // A pending or running episode (or one that recorded no step) has nothing to replay yet.
        render: (e) => (hasTrajectory(e) ? h('a.nowrap', { href: `#/submissions/${enc(id)}/episodes/${e.idx}`, 'data-testid': 'replay-link', 'aria-label': `replay episode ${e.idx} (${motionName(e.motion)})` }, 'replay →') : ''),
      },
    ];
    tableHolder.append(sortableTable(cols, episodes, { testid: 'episode-table', sortKey: 'idx', rowAttrs: (e) => ({ dataset: { idx: String(e.idx) }, class: `st-${String(e.status).toLowerCase()}` }) }));
  };
  toggle.querySelector('input').addEventListener('change', (ev) => {
    state.allMetrics = ev.target.checked;
    drawTable();
  });
  drawTable();
  epSec.append(toggle, tableHolder);
  root.append(epSec);

  // Plot (a): a metric per motion
  const plots = h('section.card#plots', h('h2', 'Plots'));
  if (!all.length && !episodes.some(hasTrajectory)) {
    plots.append(h('p.muted', yet ? 'Nothing to plot yet: no episode has been scored or recorded.' : 'Nothing to plot: no episode was scored or recorded.'));
    root.append(plots);
    return;
  }
  if (!state.metric || !all.includes(state.metric)) state.metric = ranking[0] || all[0] || null;
  const barHolder = h('div.chart-holder');
  const metricSel = h(
    'select#bar-metric',
    { 'data-testid': 'bar-metric' },
    all.map((m) => h('option', { value: m, selected: m === state.metric }, m)),
  );
  const drawBars = () => {
    clear(barHolder);
    const m = state.metric;
    if (!m) {
      barHolder.append(h('p.muted', `No metric${yet}.`));
      return;
    }
    const mi = info[m] || {};
    barHolder.append(
      barChart(
        episodes.map((e) => ({
          label: `${e.idx} ${motionName(e.motion)}`,
          title: `episode ${e.idx}, ${motionName(e.motion)} (${e.status})`,
          value: (e.metrics || {})[m] ?? null,
          status: e.status,
        })),
        { yLabel: `${m}${mi.units ? ` (${mi.units})` : ''}${mi.direction ? (mi.direction === 'lower' ? ' ↓' : ' ↑') : ''}`, testid: 'bar-chart', title: `${m} per episode (each episode's value is in the episode table above)` },
      ),
      // What the bars' colours say, in words.
      h(
        'p.legend-row.small',
        { 'data-testid': 'bar-legend' },
        h('span.swatch.bar-completed'),
        ' completed  ',
        h('span.swatch.bar-fell'),
        ' fell  ',
        h('span.swatch.bar-failed'),
        ' failed or timed out  ',
        h('span.swatch.bar-none'),
        ' no value',
      ),
    );
  };
  metricSel.addEventListener('change', () => {
    state.metric = metricSel.value;
    drawBars();
  });
  drawBars();
  plots.append(h('h3', 'Per-motion metric'), h('div.button-row', h('label', 'metric: ', metricSel)), barHolder);

  // Plot (b): tracking error over time for one episode
  const withSteps = episodes.filter(hasTrajectory);
  const lineHolder = h('div.chart-holder', { 'data-testid': 'series-holder' });
  if (state.episode === null || !withSteps.some((e) => e.idx === state.episode)) state.episode = withSteps.length ? withSteps[0].idx : null;
  const epSel = h(
    'select#series-episode',
    { 'data-testid': 'series-episode' },
    withSteps.map((e) => h('option', { value: String(e.idx), selected: e.idx === state.episode }, `${e.idx}: ${motionName(e.motion)} (${e.status})`)),
  );
  const kindSel = h(
    'select#series-kind',
    { 'data-testid': 'series-kind' },
    h('option', { value: 'body' }, 'body position error (mm)'),
    h('option', { value: 'joint' }, 'joint error (rad)'),
    h('option', { value: 'height' }, 'root height (m)'),
  );
  if (state.kind) kindSel.value = state.kind;
  const cache = new Map();
  let seq = 0;
  const drawLine = async () => {
    const my = ++seq;
    clear(lineHolder);
    if (state.episode === null) {
      lineHolder.append(h('p.muted', `No episode with recorded steps${yet}.`));
      return;
    }
    lineHolder.append(loading('Loading the time series…'));
    let sr = cache.get(state.episode);
    try {
      if (!sr) {
        sr = await api(`submissions/${enc(id)}/episodes/${state.episode}/series`);
        cache.set(state.episode, sr);
      }
    } catch (e) {
      if (my !== seq) return;
      clear(lineHolder).append(errorBox(e));
      return;
    }
    if (my !== seq) return;
    clear(lineHolder);
    const t = sr.times || [];
    let chart;
    const about = `of episode ${epSel.value} over time`;
    if (kindSel.value === 'joint') chart = lineChart(t, [{ name: 'joint error (rad)', values: sr.joint_error_rad || [] }], { xLabel: 'time (s)', yLabel: 'rad', testid: 'series-chart', title: `joint error ${about}` });
    else if (kindSel.value === 'height')
      chart = lineChart(
        t,
        [
          { name: 'simulated root height', values: sr.root_height_m || [] },
          { name: 'reference root height', values: sr.ref_root_height_m || [], className: 'series-ref' },
        ],
        { xLabel: 'time (s)', yLabel: 'm', testid: 'series-chart', title: `simulated and reference root height ${about}` },
      );
    else chart = lineChart(t, [{ name: 'mean body position error (mm)', values: sr.body_error_mm || [] }], { xLabel: 'time (s)', yLabel: 'mm', testid: 'series-chart', title: `mean body position error ${about}` });
    lineHolder.append(chart);
  };
  epSel.addEventListener('change', () => {
    state.episode = Number(epSel.value);
    drawLine();
  });
  kindSel.addEventListener('change', () => {
    state.kind = kindSel.value;
    drawLine();
  });
  plots.append(h('h3', 'Tracking error over time'), h('div.button-row', h('label', 'episode: ', epSel), ' ', h('label', 'series: ', kindSel)), lineHolder);
  root.append(plots);
  drawLine();
}

/** Episode indices as ranges: [1, 2, 3, 7] → "1–3, 7". */
function indexRanges(idxs) {
  const sorted = [...idxs].sort((a, b) => a - b);
  const parts = [];
  for (let i = 0; i < sorted.length; i++) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j] + 1) j++;
    parts.push(j > i ? `${sorted[i]}–${sorted[j]}` : String(sorted[i]));
    i = j;
  }
  return parts.join(', ');
}

/** The last session's agent, and the earlier ones when a resume came from another agent. */
function agentCell(sub) {
  const name = sub.agent_name || '—';
  const earlier = [...new Set((sub.sessions || []).map((s) => s.agent_name))].filter((a) => a && a !== sub.agent_name);
  return earlier.length ? `${name} (last session; earlier: ${earlier.join(', ')})` : name;
}

/** Session outcomes that need more than their code (the end's time is when it was noticed). */
const OUTCOME_WORDS = {
  completed: 'completed (the submission finished)',
  cancelled: 'cancelled (the organiser cancelled the submission)',
  agent_cannot_serve: 'the agent said it cannot serve this session (the submission error says why)',
  stopped: 'stopped (the agent disconnected, or the server shut down)',
  error: 'error (the server ended it; the submission error says why)',
  server_lost: 'server lost (its server was killed or crashed; ended at its restart)',
};

/** Every agent session of the submission, oldest first: agent, start, end and how it ended. */
function sessionsCell(sub) {
  const sessions = sub.sessions || [];
  if (!sessions.length) return h('span.muted', 'none yet');
  const open = ACTIVE.has(sub.status) ? 'running' : 'no end recorded (the server stopped)';
  return h(
    'ol.sessions',
    { 'data-testid': 'sessions' },
    // To the second, with the duration: sessions often start and end within a minute.
    sessions.map((s) =>
      h(
        'li',
        `${s.agent_name || 'unnamed agent'} · `,
        timeEl(s.started_at, true),
        s.ended_at
          ? [' – ', timeEl(s.ended_at, true), ` (${fmtDuration((s.ended_at - s.started_at) / 1000)}) · ${OUTCOME_WORDS[s.outcome] || s.outcome || 'ended'}`]
          : ` · ${open}`,
      ),
    ),
  );
}

/**
 * How a hosted policy maps onto the arena, as checked at upload (what `arena-agent onnx --show`
 * prints): the model's inputs, each observation term's columns and source, the per-joint values.
 */
function mappingCard(m) {
  const values = (v) => (Array.isArray(v) ? v.map((x) => fmtNum(x, 3)).join(', ') : '—');
  const terms = sortableTable(
    [
      // The mapping's ranges are half-open: shown inclusive, so no column reads as two terms'.
      { key: 'columns', label: 'Columns', sortable: false, render: (t) => h('span.mono', `${t.columns[0]}–${t.columns[1] - 1}`) },
      { key: 'name', label: 'Term', render: (t) => h('span.mono', t.name) },
      { key: 'source', label: 'Built from' },
      { key: 'scale', label: 'Scale', sortable: false, render: (t) => (t.scale ? values(t.scale) : '1') },
      { key: 'clip', label: 'Clip', sortable: false, render: (t) => (t.clip ? `[${t.clip[0]}, ${t.clip[1]}]` : '—') },
    ],
    m.terms,
    { testid: 'mapping-terms' },
  );
  const model = m.model || {};
  return h(
    'section.card#mapping',
    h('h2', 'How the policy maps onto the arena'),
    defList(
      [
        ['Metadata', m.convention],
        ['Model', `${model.observation_size} observation values${model.time_step_input ? ' and time_step' : ''}; batch ${model.batch}`],
        ['Joint order', m.joint_order],
        ['Anchor body', m.anchor_body || '—'],
        ['Targets', m.targets],
        ['Raw actions clipped', m.action_clip == null ? 'no' : `to ±${m.action_clip}`],
      ],
      'mapping-props',
    ),
    terms,
    h(
      'details',
      h('summary', 'Per-joint values (G1 order)'),
      defList([
        ['joint_stiffness', values(m.joint_stiffness)],
        ['joint_damping', values(m.joint_damping)],
        ['default_joint_pos', values(m.default_joint_pos)],
        ['action_scale', values(m.action_scale)],
      ]),
    ),
  );
}

/** A hosted submission's policy file (evaluated by the server itself; under Downloads). */
function hostedCell(sub) {
  const p = sub.hosted;
  const name = p.file_name || `${sub.id}.onnx (no file name was given)`;
  return h('span', { 'data-testid': 'hosted-policy' }, `${name} (${fmtBytes(p.bytes)}, sha256 ${String(p.sha256).slice(0, 12)}…): evaluated by the server itself`);
}
