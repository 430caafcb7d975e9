// MimicArena front end: the shell (nav, token box, who-am-I) and the routes.

import { getToken, onTokenChange, setToken, whoami } from './api.js';
import { Router, notFoundPage } from './router.js';
import { homePage } from './page-home.js';
import { benchmarkPage } from './page-benchmark.js';
import { leaderboardPage, phasePage } from './page-leaderboard.js';
import { submissionPage } from './page-submission.js';
import { episodePage } from './page-episode.js';
import { teamPage } from './page-team.js';
import { adminPage } from './page-admin.js';

const routes = [
  ['/', homePage, 'home'],
  ['/benchmarks/:name', benchmarkPage, 'benchmark'],
  ['/leaderboards/:benchmark', leaderboardPage, 'leaderboard'],
  ['/phases/:id', phasePage, 'phase'],
  ['/submissions/:id', submissionPage, 'submission'],
  ['/submissions/:id/episodes/:idx', episodePage, 'episode'],
  ['/team', teamPage, 'team'],
  ['/admin', adminPage, 'admin'],
];

const NAV_OF = { home: 'home', benchmark: 'home', leaderboard: 'home', phase: 'home', team: 'team', submission: 'team', episode: 'team', admin: 'admin' };

function setupTokenBox(router) {
  const form = document.getElementById('tokenbox');
  const input = document.getElementById('token-input');
  const clearBtn = document.getElementById('token-clear');
  const label = document.getElementById('whoami');

  async function showWho() {
    const t = getToken();
    input.value = '';
    input.placeholder = t ? 'token set (paste to replace)' : 'paste a token';
    clearBtn.hidden = !t;
    label.className = 'whoami';
    if (!t) {
      label.textContent = 'anonymous';
      label.title = 'no token: public pages only';
      label.dataset.role = 'anonymous';
      return;
    }
    label.textContent = 'checking…';
    const who = await whoami();
    if (t !== getToken()) return;
    label.dataset.role = who.role;
    if (who.role === 'admin') {
      label.textContent = 'organiser (admin)';
      label.classList.add('admin');
      label.title = 'admin token';
    } else if (who.role === 'team') {
      label.textContent = who.team ? `team ${who.team}` : 'team token';
      label.classList.add('team');
      label.title = 'team token';
    } else if (who.role === 'invalid') {
      label.textContent = 'token rejected';
      label.classList.add('bad');
      label.title = who.message || '';
    } else {
      label.textContent = 'token (unchecked)';
      label.title = who.message || '';
    }
  }

  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    if (input.value.trim()) setToken(input.value);
  });
  clearBtn.addEventListener('click', () => setToken(''));
  onTokenChange(() => {
    showWho();
    router.render();
  });
  showWho();
}

function highlightNav(name) {
  const key = NAV_OF[name] || '';
  for (const a of document.querySelectorAll('.mainnav a')) {
    a.classList.toggle('active', a.dataset.nav === key);
    if (a.dataset.nav === key) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

const router = new Router(document.getElementById('app'), routes, notFoundPage);
document.addEventListener('routechange', (ev) => {
  highlightNav(ev.detail.name);
  window.scrollTo(0, 0);
});
setupTokenBox(router);
router.render();
