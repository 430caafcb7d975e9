// REST client for the MimicArena server (/api/v1). Same-origin only.
//
// The token (a team token or the admin token) lives in sessionStorage only: never
// localStorage, never a cookie. Every call sends `Authorization: Bearer <token>` when set.

const TOKEN_KEY = 'mimicarena.token';
const ROLE_KEY = 'mimicarena.role';
const API = '/api/v1';

/** An API error: HTTP status plus the server's {"error": {"code", "message"}}. */
export class ApiError extends Error {
  constructor(status, code, message, problems = null) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    // Every reason at once, where the server lists them (a refused policy file).
    this.problems = problems;
  }
}

export function getToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || '';
  } catch {
    return '';
  }
}

const tokenListeners = new Set();

export function onTokenChange(fn) {
  tokenListeners.add(fn);
  return () => tokenListeners.delete(fn);
}

const identityListeners = new Set();

/** `fn()` runs when a request shows that the token's cached identity no longer holds (the
 * server refused the token: revoked, expired). */
export function onIdentityRefused(fn) {
  identityListeners.add(fn);
  return () => identityListeners.delete(fn);
}

/** Forgets the cached identity of a token the server now refuses, once: the header then says
 * so instead of the team it named. */
function forgetRefusedIdentity() {
  let cached = null;
  try {
    cached = sessionStorage.getItem(ROLE_KEY);
    sessionStorage.removeItem(ROLE_KEY);
  } catch {
    /* ignore */
  }
  if (!cached) return;
  whoamiPromise = null;
  for (const fn of identityListeners) fn();
}

export function setToken(token) {
  const t = (token || '').trim();
  try {
    if (t) sessionStorage.setItem(TOKEN_KEY, t);
    else sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(ROLE_KEY);
  } catch {
    /* storage unavailable: the token simply is not kept */
  }
  whoamiPromise = null;
  for (const fn of tokenListeners) fn(t);
}

function headers(extra = {}) {
  const h = { Accept: 'application/json', ...extra };
  const t = getToken();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

function url(path) {
  return path.startsWith('/') ? path : `${API}/${path}`;
}

async function errorFrom(res) {
  let code = `http_${res.status}`;
  let message = `${res.status} ${res.statusText || 'error'}`;
  let problems = null;
  try {
    const body = await res.json();
    if (body && body.error) {
      code = body.error.code || code;
      message = body.error.message || message;
      if (Array.isArray(body.error.problems)) problems = body.error.problems;
    }
  } catch {
    /* not JSON */
  }
  return new ApiError(res.status, code, message, problems);
}

/**
 * Calls the API and returns the parsed JSON. `path` is relative to /api/v1
 * ("benchmarks") or absolute ("/api/v1/benchmarks"). A GET whose token is refused is tried
 * once more without it (`publicFallback`), so public pages stay readable.
 */
export async function api(path, { method = 'GET', body, signal, publicFallback = true } = {}) {
  const opts = { method, headers: headers(), signal };
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(url(path), opts);
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    throw new ApiError(0, 'network', `cannot reach the server (${e && e.message ? e.message : e})`);
  }
  if (res.status === 401 && opts.headers.Authorization) forgetRefusedIdentity();
  if (res.status === 401 && method === 'GET' && publicFallback && opts.headers.Authorization) {
    // A refused token (unknown, revoked, expired) must not hide what anyone may read: the
    // header already says the token is refused, so public data is fetched without it. When
    // the data needs a token after all, the refusal of the token is the better message.
    const refused = await errorFrom(res);
    const anonymous = { ...opts.headers };
    delete anonymous.Authorization;
    try {
      res = await fetch(url(path), { ...opts, headers: anonymous });
    } catch {
      throw refused;
    }
    if (!res.ok) throw refused;
  }
  if (!res.ok) throw await errorFrom(res);
  if (res.status === 204) return null;
  const text = await res.text();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    throw new ApiError(res.status, 'bad_json', 'the server answered with something other than JSON');
  }
}

/** Builds "path?query" from an object, leaving out empty values; arrays repeat the key. */
export function withQuery(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v === undefined || v === null || v === '') continue;
    if (Array.isArray(v)) {
      for (const x of v) if (x !== '' && x != null) q.append(k, String(x));
    } else {
      q.append(k, String(v));
    }
  }
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

function filenameFrom(res, fallback) {
  const cd = res.headers.get('Content-Disposition') || '';
  const m = /filename\*?=(?:UTF-8'')?"?([^";]+)"?/i.exec(cd);
  if (m) {
    try {
      return decodeURIComponent(m[1]);
    } catch {
      return m[1];
    }
  }
  return fallback;
}

/**
 * Downloads a file that needs the Authorization header: fetch -> blob -> object URL ->
 * a temporary <a download> clicked once. Returns {filename, size}.
 */
export async function download(path, fallbackName) {
  let res;
  try {
    res = await fetch(url(path), { headers: headers({ Accept: '*/*' }) });
  } catch (e) {
    throw new ApiError(0, 'network', `cannot reach the server (${e && e.message ? e.message : e})`);
  }
  if (!res.ok) throw await errorFrom(res);
  const blob = await res.blob();
  const filename = filenameFrom(res, fallbackName);
  const href = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = href;
  a.download = filename;
  a.style.display = 'none';
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(href), 30000);
  return { filename, size: blob.size };
}

/**
 * POSTs a file as the request body (application/octet-stream) and returns the parsed JSON
 * answer; a refusal is an ApiError (with `problems` where the server lists them).
 */
export async function uploadFile(path, file) {
  let res;
  try {
    res = await fetch(url(path), { method: 'POST', headers: headers({ 'Content-Type': 'application/octet-stream' }), body: file });
  } catch (e) {
    throw new ApiError(0, 'network', `cannot reach the server (${e && e.message ? e.message : e})`);
  }
  if (!res.ok) throw await errorFrom(res);
  return res.json();
}

let whoamiPromise = null;

/**
 * Who the current token belongs to: {role: 'anonymous'|'team'|'admin'|'invalid'|'unknown',
 * team, message}, from GET /api/v1/whoami. Cached per token in sessionStorage.
 */
export function whoami() {
  if (!whoamiPromise) whoamiPromise = probeIdentity();
  return whoamiPromise;
}

async function probeIdentity() {
  const token = getToken();
  if (!token) return { role: 'anonymous' };
  try {
    const cached = JSON.parse(sessionStorage.getItem(ROLE_KEY) || 'null');
    if (cached && cached.role) return cached;
  } catch {
    /* ignore */
  }
  let who;
  try {
    const me = await api('whoami', { publicFallback: false });
    who = me.role === 'team' ? { role: 'team', team: me.team ? me.team.name : null } : { role: me.role };
  } catch (e) {
    if (e.status === 401 || e.status === 403) {
      return { role: 'invalid', message: e.message };
    }
    // Network trouble or a server error: do not cache, say so.
    whoamiPromise = null;
    return { role: 'unknown', message: e.message };
  }
  try {
    sessionStorage.setItem(ROLE_KEY, JSON.stringify(who));
  } catch {
    /* ignore */
  }
  return who;
}
