// Small SVG charts: bars per motion, lines over time. No library.

const NS = 'http://www.w3.org/2000/svg';

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** "Nice" ticks over [lo, hi]. */
export function ticks(lo, hi, count = 5) {
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return [];
  if (lo === hi) {
    const d = lo === 0 ? 1 : Math.abs(lo) * 0.1;
    lo -= d;
    hi += d;
  }
  const span = hi - lo;
  const raw = span / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const norm = raw / mag;
  const step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
    out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  }
  return out;
}

function tickLabel(v) {
  const a = Math.abs(v);
  if (a === 0) return '0';
  if (a >= 1e5 || a < 1e-3) return v.toExponential(1);
  if (a >= 100) return v.toFixed(0);
  return Number(v.toPrecision(3)).toString();
}

function fmtValue(v) {
  if (!Number.isFinite(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(3);
  return Number(v.toPrecision(5)).toString();
}

/**
 * Vertical bars. items: [{label, value (number|null), status, title}]; opts: {yLabel, testid}.
 * Missing values (null) show a hatched placeholder, never a zero bar.
 */
export function barChart(items, opts = {}) {
  const W = 760;
  const H = 300;
  const m = { l: 64, r: 16, t: 16, b: 86 };
  const iw = W - m.l - m.r;
  const ih = H - m.t - m.b;
  const vals = items.map((i) => i.value).filter((v) => Number.isFinite(v));
  let lo = Math.min(0, ...vals);
  let hi = Math.max(0, ...vals);
  if (!vals.length) {
    lo = 0;
    hi = 1;
  }
  const tk = ticks(lo, hi, 5);
  if (tk.length) {
    lo = Math.min(lo, tk[0]);
    hi = Math.max(hi, tk[tk.length - 1]);
  }
  if (hi === lo) hi = lo + 1;
  const y = (v) => m.t + ih - ((v - lo) / (hi - lo)) * ih;
  const svg = s('svg', {
    viewBox: `0 0 ${W} ${H}`,
    class: 'chart bar-chart',
    role: 'img',
    'aria-label': opts.title || 'bar chart',
    'data-testid': opts.testid,
  });
  svg.appendChild(
    s('defs', {}, s('pattern', { id: 'hatch', width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' }, s('line', { x1: 0, y1: 0, x2: 0, y2: 6, class: 'hatch' }))),
  );
  for (const t of tk) {
    svg.appendChild(s('line', { x1: m.l, x2: W - m.r, y1: y(t), y2: y(t), class: 'grid' }));
    svg.appendChild(s('text', { x: m.l - 6, y: y(t) + 4, class: 'tick', 'text-anchor': 'end' }, tickLabel(t)));
  }
  svg.appendChild(s('line', { x1: m.l, x2: W - m.r, y1: y(0), y2: y(0), class: 'axis' }));
  if (opts.yLabel) {
    svg.appendChild(s('text', { x: 14, y: m.t + ih / 2, class: 'axis-label', transform: `rotate(-90 14 ${m.t + ih / 2})`, 'text-anchor': 'middle' }, opts.yLabel));
  }
  const n = Math.max(items.length, 1);
  const slot = iw / n;
  const bw = Math.max(2, Math.min(48, slot * 0.7));
  items.forEach((it, i) => {
    const cx = m.l + slot * (i + 0.5);
    const g = s('g', { class: `bar status-${String(it.status || '').toLowerCase()}` });
    const title = `${it.title || it.label}: ${Number.isFinite(it.value) ? fmtValue(it.value) : 'no value'}`;
    g.appendChild(s('title', {}, title));
    if (Number.isFinite(it.value)) {
      const y0 = y(0);
      const y1 = y(it.value);
      g.appendChild(s('rect', { x: cx - bw / 2, y: Math.min(y0, y1), width: bw, height: Math.max(1, Math.abs(y1 - y0)), class: 'bar-rect' }));
    } else {
      g.appendChild(s('rect', { x: cx - bw / 2, y: m.t, width: bw, height: ih, class: 'bar-missing', fill: 'url(#hatch)' }));
    }
    const ly = H - m.b + 12;
    g.appendChild(s('text', { x: cx, y: ly, class: 'tick', 'text-anchor': 'end', transform: `rotate(-40 ${cx} ${ly})` }, truncate(it.label, 18)));
    svg.appendChild(g);
  });
  return svg;
}

function truncate(t, n) {
  const str = String(t);
  return str.length > n ? `${str.slice(0, n - 1)}…` : str;
}

/**
 * Lines over a shared x axis. x: [numbers]; series: [{name, values, className}];
 * opts: {xLabel, yLabel, testid}.
 */
export function lineChart(x, series, opts = {}) {
  const W = 760;
  const H = 300;
  const m = { l: 64, r: 16, t: 28, b: 44 };
  const iw = W - m.l - m.r;
  const ih = H - m.t - m.b;
  const xs = x.filter(Number.isFinite);
  let x0 = xs.length ? Math.min(...xs) : 0;
  let x1 = xs.length ? Math.max(...xs) : 1;
  if (x1 === x0) x1 = x0 + 1;
  let lo = Infinity;
  let hi = -Infinity;
  for (const se of series) {
    for (const v of se.values) {
      if (Number.isFinite(v)) {
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
    }
  }
  if (!Number.isFinite(lo)) {
    lo = 0;
    hi = 1;
  }
  if (opts.zero !== false) lo = Math.min(lo, 0);
  const ty = ticks(lo, hi, 5);
  if (ty.length) {
    lo = Math.min(lo, ty[0]);
    hi = Math.max(hi, ty[ty.length - 1]);
  }
  if (hi === lo) hi = lo + 1;
  const X = (v) => m.l + ((v - x0) / (x1 - x0)) * iw;
  const Y = (v) => m.t + ih - ((v - lo) / (hi - lo)) * ih;
  const svg = s('svg', {
    viewBox: `0 0 ${W} ${H}`,
    class: 'chart line-chart',
    role: 'img',
    'aria-label': opts.title || 'line chart',
    'data-testid': opts.testid,
  });
  for (const t of ty) {
    svg.appendChild(s('line', { x1: m.l, x2: W - m.r, y1: Y(t), y2: Y(t), class: 'grid' }));
    svg.appendChild(s('text', { x: m.l - 6, y: Y(t) + 4, class: 'tick', 'text-anchor': 'end' }, tickLabel(t)));
  }
  for (const t of ticks(x0, x1, 8)) {
    if (t < x0 || t > x1) continue;
    svg.appendChild(s('line', { x1: X(t), x2: X(t), y1: m.t + ih, y2: m.t + ih + 4, class: 'axis' }));
    svg.appendChild(s('text', { x: X(t), y: m.t + ih + 16, class: 'tick', 'text-anchor': 'middle' }, tickLabel(t)));
  }
  svg.appendChild(s('line', { x1: m.l, x2: W - m.r, y1: m.t + ih, y2: m.t + ih, class: 'axis' }));
  svg.appendChild(s('line', { x1: m.l, x2: m.l, y1: m.t, y2: m.t + ih, class: 'axis' }));
  if (opts.xLabel) svg.appendChild(s('text', { x: m.l + iw / 2, y: H - 6, class: 'axis-label', 'text-anchor': 'middle' }, opts.xLabel));
  if (opts.yLabel) {
    svg.appendChild(s('text', { x: 14, y: m.t + ih / 2, class: 'axis-label', transform: `rotate(-90 14 ${m.t + ih / 2})`, 'text-anchor': 'middle' }, opts.yLabel));
  }
  series.forEach((se, k) => {
    let d = '';
    let pen = false;
    const n = Math.min(x.length, se.values.length);
    // Thin long series so the path stays light (at most ~1500 points).
    const stride = Math.max(1, Math.floor(n / 1500));
    for (let i = 0; i < n; i += stride) {
      const v = se.values[i];
      if (!Number.isFinite(v) || !Number.isFinite(x[i])) {
        pen = false;
        continue;
      }
      d += `${pen ? 'L' : 'M'}${X(x[i]).toFixed(1)},${Y(v).toFixed(1)}`;
      pen = true;
    }
    svg.appendChild(s('path', { d: d || 'M0,0', class: `line ${se.className || `series-${k}`}`, fill: 'none' }));
    // legend
    const lx = m.l + 8 + k * 190;
    svg.appendChild(s('line', { x1: lx, x2: lx + 18, y1: 12, y2: 12, class: `line ${se.className || `series-${k}`}` }));
    svg.appendChild(s('text', { x: lx + 24, y: 16, class: 'legend' }, se.name));
  });
  return svg;
}
