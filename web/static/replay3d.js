// 3-D replay of an episode with three.js: the simulated robot (solid, the model's colours)
// and the reference motion (translucent), side by side or overlaid, on a floor grid.
//
// Geometry: GET /api/v1/robot (MuJoCo conventions: geoms in their body's frame; capsules and
// cylinders along the geom's local z; box sizes are half-extents). Motion: the replay's world
// position (xyz) and orientation (wxyz) of every body per frame. MuJoCo is z-up.

import * as THREE from 'three';
import { OrbitControls } from 'three/addons/controls/OrbitControls.js';

export const BACKGROUND = 0xf5f7fa;
export const GRID_MAJOR = 0x9aa7b4;
export const GRID_MINOR = 0xc8d0d8;
const REF_COLOR = 0xff7a1a;
const SIDE_OFFSET_Y = 1.0;

/** Whether this browser can make a WebGL2 context (three.js needs WebGL2). */
export function webglAvailable() {
  try {
    const c = document.createElement('canvas');
    const gl = c.getContext('webgl2');
    if (!gl) return false;
    const lose = gl.getExtension('WEBGL_lose_context');
    if (lose) lose.loseContext();
    return true;
  } catch {
    return false;
  }
}

function geometryFor(g) {
  const s = g.size || [];
  const r = Math.max(1e-4, s[0] || 0.02);
  switch (g.type) {
    case 'sphere':
      return new THREE.SphereGeometry(r, 16, 12);
    case 'ellipsoid':
      return new THREE.SphereGeometry(1, 16, 12).scale(r, s[1] || r, s[2] || r);
    case 'capsule': {
      const geo = new THREE.CapsuleGeometry(r, 2 * Math.max(0, s[1] || 0), 6, 12);
      geo.rotateX(Math.PI / 2); // three's capsule runs along y, MuJoCo's along z
      return geo;
    }
    case 'cylinder': {
      const geo = new THREE.CylinderGeometry(r, r, 2 * Math.max(1e-4, s[1] || 0.01), 16);
      geo.rotateX(Math.PI / 2);
      return geo;
    }
    case 'box':
      return new THREE.BoxGeometry(2 * (s[0] || 0.01), 2 * (s[1] || 0.01), 2 * (s[2] || 0.01));
    default:
      return null; // plane (we draw our own floor), mesh, hfield, …
  }
}

/**
 * A floor grid in the XY plane (z = 0), every line cut into cell-long segments: long lines
 * that run behind the camera are dropped by some software rasterisers (SwiftShader), short
 * segments are clipped properly everywhere. Lines through the origin are darker.
 */
function floorGrid(size, step) {
  const n = Math.round(size / step);
  const half = (n * step) / 2;
  const minor = [];
  const major = [];
  for (let i = 0; i <= n; i++) {
    const c = -half + i * step;
    const out = Math.abs(c) < 1e-9 ? major : minor;
    for (let j = 0; j < n; j++) {
      const a = -half + j * step;
      const b = a + step;
      out.push(a, c, 0, b, c, 0); // along x
      out.push(c, a, 0, c, b, 0); // along y
    }
  }
  const group = new THREE.Group();
  for (const [pts, color] of [
    [minor, GRID_MINOR],
    [major, GRID_MAJOR],
  ]) {
    const geo = new THREE.BufferGeometry();
    geo.setAttribute('position', new THREE.Float32BufferAttribute(pts, 3));
    group.add(new THREE.LineSegments(geo, new THREE.LineBasicMaterial({ color })));
  }
  return group;
}

function disposeTree(root) {
  root.traverse((o) => {
    if (o.geometry) o.geometry.dispose();
    if (o.material) o.material.dispose();
  });
}

function quatWxyz(q) {
  return new THREE.Quaternion(q[1] ?? 0, q[2] ?? 0, q[3] ?? 0, q[0] ?? 1);
}

/**
 * Builds the scene in `container`. Returns a controller:
 *   {frames, fps, setFrame(i), play(), pause(), toggle(), playing(), setSpeed(x),
 *    setMode('side'|'overlay'), setFollow(bool), onFrame(cb), dispose(), canvas}
 */
export function createReplay(container, robot, replay) {
  const frames = replay.frames || (replay.times || []).length;
  const fps = replay.fps || 50;
  const names = replay.bodies || [];
  const nb = names.length;
  const times = replay.times && replay.times.length === frames ? replay.times : Array.from({ length: frames }, (_, i) => i / fps);

  // --- renderer (context made here so a missing WebGL is a message, not an exception) ---
  const canvas = document.createElement('canvas');
  canvas.className = 'replay-canvas';
  canvas.setAttribute('data-testid', 'replay-canvas');
  // A view the keyboard can turn too (focused: arrows pan, Shift+arrows orbit, + and − zoom),
  // named for screen readers, which otherwise pass it by without a word.
  canvas.tabIndex = 0;
  // A widget the keys turn (not a picture): its keys are described by the page's hint.
  canvas.setAttribute('role', 'application');
  canvas.setAttribute('aria-roledescription', '3-D view');
  canvas.setAttribute('aria-describedby', 'replay-keys');
  canvas.setAttribute('aria-label', '3-D replay of the episode: the simulated robot in grey, the reference motion in translucent orange (beside it, or overlaid); the frame, time and errors are read out below');
  const attrs = { antialias: true, alpha: false, preserveDrawingBuffer: true, powerPreference: 'default' };
  const gl = canvas.getContext('webgl2', attrs);
  if (!gl) throw new Error('WebGL2 is not available in this browser, so the 3-D replay cannot be drawn.');
  container.appendChild(canvas);
  const renderer = new THREE.WebGLRenderer({ canvas, context: gl, antialias: true, preserveDrawingBuffer: true });
  renderer.setPixelRatio(Math.min(window.devicePixelRatio || 1, 2));
  renderer.setClearColor(BACKGROUND, 1);

  const scene = new THREE.Scene();
  scene.background = new THREE.Color(BACKGROUND);
  const camera = new THREE.PerspectiveCamera(40, 16 / 9, 0.05, 200);
  camera.up.set(0, 0, 1);

  scene.add(new THREE.HemisphereLight(0xffffff, 0x8090a0, 1.6));
  const sun = new THREE.DirectionalLight(0xffffff, 1.6);
  sun.position.set(3, -4, 6);
  scene.add(sun);

  const grid = floorGrid(20, 0.5);
  scene.add(grid);

  // --- bodies ---
  const robotBodies = (robot && robot.bodies) || [];
  const byName = new Map(names.map((n, i) => [n, i]));
  const disposables = [];
  const simMaterials = new Map();
  const refMaterial = new THREE.MeshStandardMaterial({ color: REF_COLOR, transparent: true, opacity: 0.38, roughness: 0.7, depthWrite: false });
  disposables.push(refMaterial);

  const simRoot = new THREE.Group();
  const refRoot = new THREE.Group();
  scene.add(simRoot, refRoot);
  const simGroups = names.map(() => new THREE.Group());
  const refGroups = names.map(() => new THREE.Group());
  simGroups.forEach((g) => simRoot.add(g));
  refGroups.forEach((g) => refRoot.add(g));

  let drawn = 0;
  for (const g of (robot && robot.geoms) || []) {
    if (g.type === 'plane') continue;
    const rgba = g.rgba || [0.6, 0.6, 0.65, 1];
    if ((rgba[3] ?? 1) <= 0) continue; // invisible (collision-only) geoms
    const bodyName = g.body >= 0 && robotBodies[g.body] ? robotBodies[g.body].name : null;
    const j = bodyName !== null && byName.has(bodyName) ? byName.get(bodyName) : g.body >= 0 && g.body < nb && !robotBodies.length ? g.body : -1;
    const geo = geometryFor(g);
    if (!geo) continue;
    disposables.push(geo);
    const key = rgba.map((x) => Number(x).toFixed(3)).join(',');
    let mat = simMaterials.get(key);
    if (!mat) {
      mat = new THREE.MeshStandardMaterial({
        color: new THREE.Color(rgba[0], rgba[1], rgba[2]),
        roughness: 0.6,
        metalness: 0.1,
        transparent: (rgba[3] ?? 1) < 1,
        opacity: rgba[3] ?? 1,
      });
      simMaterials.set(key, mat);
      disposables.push(mat);
    }
    const pos = g.pos || [0, 0, 0];
    const q = quatWxyz(g.quat || [1, 0, 0, 0]);
    const sim = new THREE.Mesh(geo, mat);
    sim.position.set(pos[0], pos[1], pos[2]);
    sim.quaternion.copy(q);
    if (j < 0) {
      // a world geom (not the floor): static in both scenes
      scene.add(sim);
      continue;
    }
    simGroups[j].add(sim);
    const ref = new THREE.Mesh(geo, refMaterial);
    ref.position.copy(sim.position);
    ref.quaternion.copy(sim.quaternion);
    ref.renderOrder = 1;
    refGroups[j].add(ref);
    drawn += 1;
  }
  // No geometry for the bodies (e.g. a model of meshes only): small spheres at each body.
  if (drawn === 0 && nb > 0) {
    const geo = new THREE.SphereGeometry(0.04, 12, 8);
    const mat = new THREE.MeshStandardMaterial({ color: 0x4a6fa5 });
    disposables.push(geo, mat);
    for (let j = 0; j < nb; j++) {
      simGroups[j].add(new THREE.Mesh(geo, mat));
      refGroups[j].add(new THREE.Mesh(geo, refMaterial));
    }
  }

  const simPos = (replay.sim && replay.sim.pos) || [];
  const simQuat = (replay.sim && replay.sim.quat) || [];
  const refPos = (replay.ref && replay.ref.pos) || [];
  const refQuat = (replay.ref && replay.ref.quat) || [];
  const hasRef = refPos.length >= frames * nb * 3 && frames > 0;
  refRoot.visible = hasRef;
  const pelvis = byName.has('pelvis') ? byName.get('pelvis') : 0;

  function pose(groups, P, Q, f) {
    for (let j = 0; j < nb; j++) {
      const pi = (f * nb + j) * 3;
      const qi = (f * nb + j) * 4;
      if (pi + 2 < P.length) groups[j].position.set(P[pi], P[pi + 1], P[pi + 2]);
      if (qi + 3 < Q.length) groups[j].quaternion.set(Q[qi + 1], Q[qi + 2], Q[qi + 3], Q[qi]);
    }
  }

  function pelvisAt(f) {
    const pi = (f * nb + pelvis) * 3;
    return new THREE.Vector3(simPos[pi] ?? 0, simPos[pi + 1] ?? 0, simPos[pi + 2] ?? 0.8);
  }

  // --- camera and controls ---
  let mode = 'side';
  let follow = true;
  const center = () => {
    const p = frames ? pelvisAt(0) : new THREE.Vector3(0, 0, 0.8);
    if (mode === 'side' && hasRef) p.y += SIDE_OFFSET_Y / 2;
    return p;
  };
  const c0 = center();
  camera.position.set(c0.x + 2.1, c0.y - 2.9, c0.z + 0.7);
  const controls = new OrbitControls(camera, canvas);
  controls.target.copy(c0);
  controls.enableDamping = false;
  controls.listenToKeyEvents(canvas);
  controls.update();
  canvas.addEventListener('keydown', (ev) => {
    const factor = ev.key === '+' || ev.key === '=' ? 0.85 : ev.key === '-' || ev.key === '_' ? 1 / 0.85 : 0;
    if (!factor) return;
    ev.preventDefault();
    camera.position.sub(controls.target).multiplyScalar(factor).add(controls.target);
    controls.update();
  });

  let frame = 0;
  let playhead = 0; // seconds
  let isPlaying = false;
  let speed = 1;
  let dirty = true;
  let raf = 0;
  let last = null;
  let lastPelvis = frames ? pelvisAt(0) : new THREE.Vector3();
  const listeners = new Set();

  controls.addEventListener('change', () => {
    dirty = true;
  });

  function applyFrame(f) {
    frame = Math.max(0, Math.min(frames - 1, f | 0));
    if (frames === 0) return;
    pose(simGroups, simPos, simQuat, frame);
    if (hasRef) pose(refGroups, refPos, refQuat, frame);
    refRoot.position.set(0, mode === 'side' ? SIDE_OFFSET_Y : 0, 0);
    if (follow) {
      const p = pelvisAt(frame);
      const d = new THREE.Vector3(p.x - lastPelvis.x, p.y - lastPelvis.y, 0);
      camera.position.add(d);
      controls.target.add(d);
      controls.update();
      lastPelvis = p;
    } else {
      lastPelvis = pelvisAt(frame);
    }
    dirty = true;
    for (const fn of listeners) fn(frame, times[frame]);
  }

  function resize() {
    const w = Math.max(1, container.clientWidth);
    const hgt = Math.max(1, Math.round(Math.min(w * 0.5625, window.innerHeight * 0.7)));
    renderer.setSize(w, hgt, true);
    camera.aspect = w / hgt;
    camera.updateProjectionMatrix();
    dirty = true;
  }
  const ro = typeof ResizeObserver !== 'undefined' ? new ResizeObserver(() => resize()) : null;
  if (ro) ro.observe(container);
  resize();

  function tick(now) {
    raf = requestAnimationFrame(tick);
    if (isPlaying && frames > 0) {
      if (last !== null) {
        playhead += ((now - last) / 1000) * speed;
        let f = Math.floor(playhead * fps);
        if (f >= frames - 1) {
          f = frames - 1;
          isPlaying = false;
          for (const fn of listeners) fn(f, times[f], 'ended');
        }
        if (f !== frame) applyFrame(f);
      }
      last = now;
    } else {
      last = null;
    }
    if (dirty) {
      dirty = false;
      renderer.render(scene, camera);
    }
  }

  applyFrame(0);
  renderer.render(scene, camera);
  dirty = false;
  raf = requestAnimationFrame(tick);

  const api = {
    canvas,
    frames,
    fps,
    times,
    get frame() {
      return frame;
    },
    setFrame(f) {
      playhead = Math.max(0, Math.min(frames - 1, f | 0)) / fps;
      applyFrame(f);
    },
    play() {
      if (frames <= 1) return;
      if (frame >= frames - 1) {
        playhead = 0;
        applyFrame(0);
      } else {
        playhead = frame / fps;
      }
      isPlaying = true;
      last = null;
    },
    pause() {
      isPlaying = false;
    },
    toggle() {
      if (isPlaying) api.pause();
      else api.play();
      return isPlaying;
    },
    playing: () => isPlaying,
    setSpeed(x) {
      speed = Number(x) || 1;
    },
    setMode(m) {
      mode = m === 'overlay' ? 'overlay' : 'side';
      applyFrame(frame);
    },
    setFollow(on) {
      follow = !!on;
      lastPelvis = pelvisAt(frame);
      if (follow) {
        // re-centre on the pelvis, keeping the viewing direction
        const p = lastPelvis.clone();
        if (mode === 'side' && hasRef) p.y += SIDE_OFFSET_Y / 2;
        const off = camera.position.clone().sub(controls.target);
        controls.target.copy(p);
        camera.position.copy(p).add(off);
        controls.update();
      }
      dirty = true;
    },
    /** Draws now (synchronously); returns the number of meshes drawn per robot. */
    renderNow() {
      renderer.render(scene, camera);
      return drawn;
    },
    onFrame(fn) {
      listeners.add(fn);
      return () => listeners.delete(fn);
    },
    hasRef,
    meshes: drawn,
    dispose() {
      cancelAnimationFrame(raf);
      if (ro) ro.disconnect();
      listeners.clear();
      controls.dispose();
      for (const d of disposables) d.dispose();
      disposeTree(grid);
      renderer.dispose();
      renderer.forceContextLoss();
      canvas.remove();
    },
  };
  return api;
}
