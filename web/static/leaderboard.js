// The leaderboard table (benchmark pages, #/leaderboards/{b}, #/phases/{id}).

import { api, whoami } from './api.js';
import { badge, enc, errorBox, fmtNum, fmtPct, h, metricLabel, notice, plural, sortableTable, timeEl } from './ui.js';

/** metric name -> {description, formula, units, direction} from a benchmark's metric_info. */
export function metricInfoMap(bench) {
  const map = {};
  for (const mi of (bench && bench.metric_info) || []) map[mi.name] = mi;
  return map;
}

/** Loads a benchmark's JSON for units/arrows; failures only lose the units. */
export async function loadBenchmarkInfo(name, signal) {
  try {
    return await api(`benchmarks/${enc(name)}`, { signal });
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    return null;
  }
}

/** Scored by an older arena's rules: its report's format is older than the server's. */
function olderFormat(lb, e) {
  return e.report_format_version != null && lb.report_format_version != null && e.report_format_version < lb.report_format_version;
}

/**
 * Which leaderboard entries this visitor may open (a submission page needs the owning team's
 * token or the admin token): the admin every one, a team its own, an anonymous visitor none.
 */
export function entryOpener(who) {
  if (who && who.role === 'admin') return () => true;
  if (who && who.role === 'team' && who.team) return (e) => e.team === who.team;
  return () => false;
}

/**
 * Renders a Leaderboard JSON as a sortable table.
 * lb: {benchmark, success_metric, survival_metric, primary, direction, entries: [...]}; info:
 * metricInfoMap; canOpen(entry): whether to link the entry's submission page (default: never).
 * Entries come in ranking order; baselines have no rank number (`rank` null) and keep their place.
 */
export function leaderboardTable(lb, info = {}, { canOpen = () => false, testid = 'leaderboard-table', empty = 'No completed submission yet.' } = {}) {
  const rows = (lb.entries || []).map((e, i) => ({ ...e, order: i + 1 }));
  const primaryInfo = { ...(info[lb.primary] || {}) };
  if (!primaryInfo.direction && lb.direction) primaryInfo.direction = lb.direction;
  const tieNames = [];
  for (const e of lb.entries || []) {
    for (const [name] of e.tie_breakers || []) if (!tieNames.includes(name)) tieNames.push(name);
  }
  const cols = [
    {
      key: 'order',
      label: 'Rank',
      numeric: true,
      render: (e) => (e.rank != null ? String(e.rank) : h('span.muted', { title: e.baseline ? 'baselines are shown at their place, without a rank' : 'not ranked' }, '—')),
    },
    {
      key: 'team',
      label: 'Team',
      render: (e) => h('span.team.lb-name', e.team),
    },
    {
      key: 'agent_name',
      label: 'Agent',
      render: (e) => [
        h('span.agent.lb-name', e.agent_name || '—'),
        e.baseline ? [' ', badge('baseline', 'teal', 'baseline-badge')] : null,
        olderFormat(lb, e) ? [' ', h('span', { title: `scored by an older arena's rules (report format ${e.report_format_version}); the organisers can score it again` }, badge('older scoring', 'orange', 'older-format-badge'))] : null,
      ],
    },
    {
      key: 'submission_id',
      label: 'Submission',
      render: (e) =>
        canOpen(e)
          ? h('a.mono', { href: `#/submissions/${enc(e.submission_id)}`, 'data-testid': 'submission-link' }, e.submission_id)
          : h('span.mono', { title: "its page needs the team's token or the admin token", 'data-testid': 'submission-id' }, e.submission_id),
    },
    // To the second: of two equal scores the earlier finish ranks first (docs/server.md).
    { key: 'finished_at', label: 'Finished', render: (e) => timeEl(e.finished_at, true), defaultDir: 'desc' },
  ];
  if (lb.success_metric || (lb.entries || []).some((e) => e.success_rate !== null && e.success_rate !== undefined)) {
    cols.push({
      key: 'success_rate',
      label: h('span', { title: `share of all episodes with ${lb.success_metric || 'success'} = 1` }, 'Success rate ', h('span.arrow', { title: 'higher is better' }, '↑')),
      numeric: true,
      defaultDir: 'desc',
      render: (e) => fmtPct(e.success_rate),
    });
  }
  if (lb.other_success_metric && (lb.entries || []).some((e) => e.other_success_rate !== null && e.other_success_rate !== undefined)) {
    // `success` is PHC's strict rule (its strict_eval: every body and the mean within the
    // threshold); PHC's default evaluation prints the mean criterion alone (docs/metrics.md).
    const other = lb.other_success_metric === 'mjlab_success' ? "mjlab's rule" : "PHC's strict rule";
    cols.push({
      key: 'other_success_rate',
      label: h('span.muted', { title: `share of all episodes with ${lb.other_success_metric} = 1: the other success rule, shown, not ranked (docs/metrics.md)` }, `Success, ${other}`),
      numeric: true,
      defaultDir: 'desc',
      render: (e) => h('span.muted', { 'data-testid': 'other-success' }, fmtPct(e.other_success_rate)),
    });
  }
  if (lb.survival_metric) {
    const mi = info[lb.survival_metric] || {};
    cols.push({
      key: 'survival',
      label: h('span', { title: `mean ${lb.survival_metric} over scored episodes: how long the robot keeps to the reference (ranked after the success rate)` }, 'Time to failure (s) ', h('span.arrow', { title: 'higher is better' }, '↑')),
      numeric: true,
      defaultDir: mi.direction === 'lower' ? 'asc' : 'desc',
      // Every episode succeeded: nothing failed, so the mean is the episodes' length, not a
      // time to failure.
      // null while the benchmark's motions are hidden (a test set): the server withholds times.
      render: (e) =>
        e.survival === null || e.survival === undefined
          ? lb.seconds_withheld
            ? h('span.muted', { title: 'withheld while the motions are hidden (a test set)' }, 'withheld')
            : h('span.muted', { title: 'not measured' }, '—')
          : e.success_rate === 1
            ? h('span.muted', { title: `no episode failed: ${fmtNum(e.survival)} s is the mean episode length`, 'data-testid': 'survival-none' }, 'none failed')
            : fmtNum(e.survival),
    });
  }
  cols.push({
    key: 'score',
    label: metricLabel(lb.primary, primaryInfo),
    numeric: true,
    defaultDir: primaryInfo.direction === 'higher' ? 'desc' : 'asc',
    render: (e) => h('strong', fmtNum(e.score)),
  });
  tieNames.forEach((name) => {
    const mi = info[name] || {};
    cols.push({
      key: `tb:${name}`,
      label: metricLabel(name, mi),
      numeric: true,
      defaultDir: mi.direction === 'higher' ? 'desc' : 'asc',
      value: (e) => tieValue(e, name),
      render: (e) => fmtNum(tieValue(e, name)),
    });
  });
  cols.push({
    key: 'scored_episodes',
    label: h('span', { title: 'scored episodes (failed episodes in brackets)' }, 'Episodes'),
    numeric: true,
    render: (e) => [String(e.scored_episodes ?? '—'), e.failed_episodes ? h('span.muted', ` (+${e.failed_episodes} failed)`) : null],
  });
  return sortableTable(cols, rows, {
    testid,
    sortKey: 'order',
    empty,
    rowAttrs: (e) => ({ class: e.baseline ? 'baseline-row' : '', dataset: { submissionId: e.submission_id, rank: e.rank != null ? String(e.rank) : '' } }),
  });
}

function tieValue(e, name) {
  for (const [n, v] of e.tie_breakers || []) if (n === name) return v;
  return null;
}

/**
 * The ranking rule in words, whole: the server's order (leaderboard.rs, the benchmark's
 * `ranking_rule`) is the success rate, the most scored episodes, the time to failure, the
 * primary metric, each tie-breaker, then the earlier finish. The tie-breakers come from the
 * benchmark (`ranking.tie_breakers`), else from the entries, which carry their values.
 */
export function rankingRuleText(lb, bench, info = {}) {
  const ties = (bench && bench.ranking && bench.ranking.tie_breakers) || [];
  const names = ties.length ? ties : [...new Set((lb.entries || []).flatMap((e) => (e.tie_breakers || []).map(([n]) => n)))];
  const better = (dir) => (dir ? ` (${dir === 'higher' ? 'higher' : 'lower'} is better)` : '');
  return [
    lb.success_metric ? `${lb.success_metric} rate first` : null,
    'then the most scored episodes',
    lb.survival_metric ? 'then the longest time to failure' : null,
    `then mean ${lb.primary}${better(lb.direction || 'lower')}`,
    ...names.map((n) => `then mean ${n}${better((info[n] || {}).direction)}`),
    'then the earlier finish',
  ]
    .filter(Boolean)
    .join(', ')
    .replace(/^then /, '');
}

/**
 * "3 entries ranked by …": baselines are rows of their own, placed by the same rule but not
 * numbered, so they are counted apart from the ranked entries.
 */
function captionText(lb, bench, info) {
  const entries = lb.entries || [];
  const ranked = entries.filter((e) => e.rank != null).length;
  const baselines = entries.filter((e) => e.rank == null && e.baseline).length;
  const also = baselines
    ? `; also ${plural(baselines, 'baseline row')} (the organisers' reference ${baselines === 1 ? 'agent' : 'agents'}), shown at ${baselines === 1 ? 'its' : 'their'} place without a rank`
    : '';
  return `${plural(ranked, 'entry', 'entries')} ranked by ${rankingRuleText(lb, bench, info)}${also}. Click a column header to sort.`;
}

/**
 * The private phases on `benchmark` whose results are hidden now (not ended), from the
 * challenges' phase lists. The benchmark's board leaves their submissions out until they end,
 * so an empty board there means "hidden", not "nothing yet". Asked only when the board says
 * something is withheld from this visitor; a failed look-up just loses the explanation.
 */
export async function hiddenPhasesOf(benchmark, signal) {
  let challenges;
  try {
    ({ challenges } = await api('challenges', { signal }));
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    return [];
  }
  const details = await Promise.all(
    (challenges || []).map((c) =>
      api(`challenges/${enc(c.id)}`, { signal }).catch((e) => {
        if (e && e.name === 'AbortError') throw e;
        return { phases: [] };
      }),
    ),
  );
  return details.flatMap((c) => c.phases || []).filter((p) => p.benchmark === benchmark && phaseResultsHidden(p));
}

/** Whether a phase hides its results from teams and visitors now: private and not ended. */
export function phaseResultsHidden(phase) {
  return !!phase && phase.leaderboard === 'private' && phase.state !== 'closed';
}

/** Why the board lacks the submissions of private phases that have not ended, naming them. */
function hiddenPhasesText(phases) {
  const one = phases.length === 1;
  const list = phases.flatMap((p, i) => [i ? ', ' : '', h('a', { href: `#/phases/${enc(p.id)}` }, p.id), ' (ends ', timeEl(p.ends_at), ')']);
  return h(
    'span',
    { 'data-testid': 'phases-hidden' },
    `The results of private ${one ? 'phase' : 'phases'} `,
    list,
    ` are hidden until ${one ? 'it ends' : 'they end'}: ${one ? 'its' : 'their'} submissions join this board then.`,
  );
}

/**
 * Fetches a leaderboard and renders it (or the server's reason why not) into `el`. `bench` is
 * the benchmark's JSON (units, arrows, tie-breakers; null when it could not be loaded).
 */
export async function renderLeaderboard(el, path, bench, ctx) {
  const info = metricInfoMap(bench);
  let lb;
  let who;
  try {
    [lb, who] = await Promise.all([api(path, { signal: ctx && ctx.signal }), whoami()]);
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    if (e.code === 'hidden') {
      el.appendChild(notice(e.message, 'warn', 'leaderboard-hidden'));
    } else {
      el.appendChild(errorBox(e));
    }
    return null;
  }
  if (ctx && !ctx.live()) return null;
  // A benchmark's board withholds something from this visitor (`seconds_withheld`: its motions
  // are hidden): a private phase on it that has not ended may be why entries are missing.
  const hidden = !lb.phase && lb.seconds_withheld && who.role !== 'admin' ? await hiddenPhasesOf(lb.benchmark, ctx && ctx.signal) : [];
  if (ctx && !ctx.live()) return null;
  el.appendChild(h('p.muted.lb-caption', captionText(lb, bench, info)));
  if (hidden.length && (lb.entries || []).length) el.appendChild(notice(hiddenPhasesText(hidden), 'info'));
  const empty = hidden.length ? hiddenPhasesText(hidden) : 'No completed submission yet.';
  el.appendChild(leaderboardTable(lb, info, { canOpen: entryOpener(who), empty }));
  if (lb.older_report_format) {
    el.appendChild(
      h('p.muted', { 'data-testid': 'leaderboard-older-format' }, `${plural(lb.older_report_format, 'submission was', 'submissions were')} scored by an older arena's rules (marked "older scoring"): not comparable with the others until the organisers score ${lb.older_report_format === 1 ? 'it' : 'them'} again.`),
    );
  }
  if (lb.other_versions) {
    el.appendChild(
      h('p.muted', { 'data-testid': 'leaderboard-other-versions' }, `${plural(lb.other_versions, 'submission', 'submissions')} of earlier versions of the benchmark (now version ${lb.version}) not ranked: its results are not comparable with theirs.`),
    );
  }
  const unranked = lb.unranked || [];
  if (unranked.length) {
    const sec = h('div.unranked', { 'data-testid': 'leaderboard-unranked' },
      h('h3', 'Not ranked ', badge('no scored episode', 'red', 'unranked-badge')),
      h('p.muted', `${plural(unranked.length, 'submission', 'submissions')} whose every episode failed or timed out: nothing to rank them by.`),
      leaderboardTable({ ...lb, entries: unranked }, info, { canOpen: entryOpener(who), testid: 'unranked-table', empty: '' }),
    );
    el.appendChild(sec);
  }
  return lb;
}
