#!/usr/bin/env python3
"""MimicArena GPU simulation worker: N Unitree G1 environments stepped with MuJoCo MJX.

The Rust supervisor starts ``python gpu_worker.py --shm PATH``, writes one JSON init line to
stdin, waits for the one-line JSON reply, then sends one command per line (``sync``, ``step``,
``close``); every command gets exactly one reply line (``ok`` or ``error <message>``). stdout
carries protocol lines only: file descriptor 1 is redirected to stderr at start-up, so any
library output lands in the log. EOF on stdin ends the worker (exit 0).

Init (one line):
  {"mjcf": PATH, "num_envs": N, "kp": [29], "kd": [29], "effort": [29], "decimation": 4,
   "torso_body": 16, "device": "auto"|"cpu"|"gpu", "impl": "jax"|"warp", "x64": false,
   "contact_forces": true}
Reply: {"ready": true, "backend": "mjx", "impl", "device", "jax", "mujoco", "compile_s"}
or {"error": MESSAGE} and exit code 1. Only impl "jax" runs for now; "warp" gets an error.

Shared memory: PATH holds float64 little-endian arrays in C order, back to back; offsets are in
float64 elements (bytes = 8 x offset), N = num_envs, total 729 N elements = 5832 N bytes.

  | #  | array         | shape     | offset | dir | meaning                                   |
  |----|---------------|-----------|--------|-----|-------------------------------------------|
  | 1  | targets       | [N,29]    | 0      | in  | joint position targets (rad)              |
  | 2  | active        | [N]       | 29N    | in  | 1 = advance this env on `step`            |
  | 3  | reset_flag    | [N]       | 30N    | in  | 1 = reset from reset_qpos / reset_qvel    |
  | 4  | reset_qpos    | [N,36]    | 31N    | in  |                                           |
  | 5  | reset_qvel    | [N,35]    | 67N    | in  |                                           |
  | 6  | params_flag   | [N]       | 102N   | in  | 1 = apply params                          |
  | 7  | params        | [N,36]    | 103N   | in  | mass_scale 30, torso_com_offset 3,        |
  |    |               |           |        |     | friction 1 (NaN = model's), kp_scale,     |
  |    |               |           |        |     | kd_scale                                  |
  | 8  | push_flag     | [N]       | 139N   | in  | 1 = apply push                            |
  | 9  | push          | [N,6]     | 140N   | in  | dv world xyz, dw world xyz                |
  | 10 | qpos          | [N,36]    | 146N   | out |                                           |
  | 11 | qvel          | [N,35]    | 182N   | out |                                           |
  | 12 | torque        | [N,29]    | 217N   | out | clamped torques of the last substep       |
  | 13 | body_pos      | [N,30,3]  | 246N   | out | xpos of bodies 1..30                      |
  | 14 | body_quat     | [N,30,4]  | 336N   | out | xquat (wxyz)                              |
  | 15 | body_lin_vel  | [N,30,3]  | 456N   | out | world, at each body's CoM                 |
  | 16 | body_ang_vel  | [N,30,3]  | 546N   | out | world                                     |
  | 17 | contact_force | [N,30,3]  | 636N   | out | net world contact force, last substep     |
  | 18 | failed        | [N]       | 726N   | out | 0 ok, 1 bad qpos, 2 bad qvel, 3 bad qacc  |
  | 19 | failed_time   | [N]       | 727N   | out | sim time at which the bad state appeared  |
  | 20 | time          | [N]       | 728N   | out | sim time since reset                      |

Within a command the worker applies params, then resets, then pushes (then, for `step`, the
control step), writes every output array, and clears the flags it consumed.

Physics equals MimicArena's CPU backend (simulator/src/handler.rs): one control step is
`decimation` substeps of tau = clip(kp (target - q) - kd qdot, -effort, effort) followed by
mj_step; afterwards kinematics, com_pos and com_vel refresh the body quantities (contacts and
contact forces stay those of the last substep, as after MuJoCo's mj_step). Domain
randomisation starts from the nominal model each time; the MuJoCo C library's mj_setConst
recomputes the derived constants on the host, and every per-env model field (body_mass,
body_ipos, geom_friction, body_subtreemass, body_invweight0, dof_invweight0) is a batched
input of the compiled functions.
"""
import argparse
import json
import math
import os
import sys
import time
import traceback

import numpy as np

NQ, NV, NJ, NB = 36, 35, 29, 30
NPARAMS = NB + 3 + 1 + 1 + 1
# mjMAXVAL: MuJoCo's threshold for bad qpos / qvel / qacc (mj_checkPos, mj_checkVel, mj_checkAcc).
MAXVAL = 1e10

# (name, per-env shape) in shared-memory order; outputs start at "qpos".
LAYOUT = (
    ("targets", (NJ,)),
    ("active", ()),
    ("reset_flag", ()),
    ("reset_qpos", (NQ,)),
    ("reset_qvel", (NV,)),
    ("params_flag", ()),
    ("params", (NPARAMS,)),
    ("push_flag", ()),
    ("push", (6,)),
    ("qpos", (NQ,)),
    ("qvel", (NV,)),
    ("torque", (NJ,)),
    ("body_pos", (NB, 3)),
    ("body_quat", (NB, 4)),
    ("body_lin_vel", (NB, 3)),
    ("body_ang_vel", (NB, 3)),
    ("contact_force", (NB, 3)),
    ("failed", ()),
    ("failed_time", ()),
    ("time", ()),
)
# Outputs the device packs into one flat block (in this order, contiguous in shared memory).
DEVICE_OUTPUTS = ("qpos", "qvel", "torque", "body_pos", "body_quat", "body_lin_vel",
                  "body_ang_vel", "contact_force")


class InitError(Exception):
    """A bad init message or environment; reported as {"error": ...}."""


class CommandError(Exception):
    """A command that cannot be applied; reported as `error <message>`."""


def shm_size(num_envs):
    """Bytes of the shared-memory file for `num_envs` environments."""
    return 8 * num_envs * sum(math.prod(shape) for _, shape in LAYOUT)


def map_shm(path, num_envs):
    """Maps the shared-memory file and returns {name: [N, ...] view}."""
    expected = shm_size(num_envs)
    try:
        actual = os.path.getsize(path)
    except OSError as e:
        raise InitError(f"shared memory file {path}: {e.strerror}") from None
    if actual != expected:
        raise InitError(
            f"shared memory file {path} has {actual} bytes, expected {expected} "
            f"(num_envs={num_envs}, {expected // num_envs} bytes per env)")
    mem = np.memmap(path, dtype="<f8", mode="r+", shape=(expected // 8,))
    views, offset = {}, 0
    for name, shape in LAYOUT:
        size = num_envs * math.prod(shape)
        views[name] = mem[offset:offset + size].reshape((num_envs,) + shape)
        offset += size
    return mem, views


def parse_init(line):
    """Validates the init message; returns it as a dict with typed values."""
    try:
        msg = json.loads(line)
    except json.JSONDecodeError as e:
        raise InitError(f"init line is not JSON: {e}") from None
    if not isinstance(msg, dict):
        raise InitError("init line must be a JSON object")
    required = ("mjcf", "num_envs", "kp", "kd", "effort")
    missing = [k for k in required if k not in msg]
    if missing:
        raise InitError(f"init message lacks {', '.join(missing)}")
    cfg = {
        "mjcf": msg["mjcf"],
        "num_envs": msg["num_envs"],
        "decimation": msg.get("decimation", 4),
        "torso_body": msg.get("torso_body", 16),
        "device": msg.get("device", "cpu"),
        "impl": msg.get("impl", "jax"),
        "x64": msg.get("x64", False),
        "contact_forces": msg.get("contact_forces", True),
    }
    if not isinstance(cfg["mjcf"], str) or not os.path.isfile(cfg["mjcf"]):
        raise InitError(f"mjcf file not found: {cfg['mjcf']}")
    for key, low, high in (("num_envs", 1, None), ("decimation", 1, None), ("torso_body", 1, NB)):
        v = cfg[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < low or (high is not None and v > high):
            bound = f"an integer >= {low}" if high is None else f"an integer in {low}..{high}"
            raise InitError(f"{key} must be {bound}, got {v!r}")
    for key in ("kp", "kd", "effort"):
        v = msg[key]
        if (not isinstance(v, list) or len(v) != NJ
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)):
            raise InitError(f"{key} must be a list of {NJ} numbers")
        arr = np.asarray(v, dtype=np.float64)
        if not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise InitError(f"{key} must be finite and non-negative")
        cfg[key] = arr
    if cfg["device"] not in ("auto", "cpu", "gpu"):
        raise InitError(f"unknown device {cfg['device']!r} (expected auto, cpu or gpu)")
    if cfg["impl"] == "warp":
        # MJX-Warp batches worlds itself (leading world axis, contacts pooled across worlds)
        # instead of through jax.vmap, so it needs its own state layout and contact decoding.
        raise InitError("impl warp is not supported by this worker yet (use impl jax)")
    if cfg["impl"] != "jax":
        raise InitError(f"unknown impl {cfg['impl']!r} (expected jax or warp)")
    for key in ("x64", "contact_forces"):
        if not isinstance(cfg[key], bool):
            raise InitError(f"{key} must be true or false")
    return cfg


class Worker:
    """Batched MJX state of N environments, the compiled functions that advance it, and the
    host-side domain-randomisation model fields."""

    def __init__(self, cfg, views):
        # Importing inside: JAX reads JAX_PLATFORMS and the x64 flag only before first use.
        import jax
        import jax.numpy as jnp
        import mujoco
        from mujoco import mjx

        self.jax, self.jnp, self.mujoco, self.mjx = jax, jnp, mujoco, mjx
        self.cfg, self.views = cfg, views
        n = self.n = cfg["num_envs"]
        try:
            # auto: JAX's default backend, the GPU when it sees one, else its CPU.
            self.device = jax.devices()[0] if cfg["device"] == "auto" else jax.devices(cfg["device"])[0]
        except RuntimeError as e:
            raise InitError(f"no JAX {cfg['device']} device: {e}") from None

        try:
            model = mujoco.MjModel.from_xml_path(cfg["mjcf"])
        except Exception as e:  # mujoco raises ValueError with the compiler's message
            raise InitError(f"cannot load {cfg['mjcf']}: {e}") from None
        if (model.nq, model.nv, model.nu, model.nbody) != (NQ, NV, NJ, NB + 1):
            raise InitError(
                f"model has nq={model.nq} nv={model.nv} nu={model.nu} nbody={model.nbody}; "
                f"expected nq={NQ} nv={NV} nu={NJ} nbody={NB + 1}")
        self.model = model
        self.dt = float(model.opt.timestep)
        # Nominal values that every params update starts from, and a scratch model on which
        # the C library recomputes the derived constants (mj_setConst), as the CPU backend does.
        self.nominal = {k: getattr(model, k).copy() for k in ("body_mass", "body_ipos", "geom_friction")}
        self.scratch = mujoco.MjModel.from_xml_path(cfg["mjcf"])
        self.scratch_data = mujoco.MjData(self.scratch)
        self.dr_fields = ("body_mass", "body_ipos", "geom_friction", "body_subtreemass",
                          "body_invweight0", "dof_invweight0")
        self.dr_host = {k: np.repeat(getattr(model, k)[None], n, axis=0) for k in self.dr_fields}
        self.kp_host = np.repeat(cfg["kp"][None], n, axis=0)
        self.kd_host = np.repeat(cfg["kd"][None], n, axis=0)

        try:
            self.mx = mjx.put_model(model, device=self.device, impl=cfg["impl"])
            template = mjx.make_data(self.mx, device=self.device, impl=cfg["impl"])
        except (NotImplementedError, RuntimeError, ValueError) as e:
            raise InitError(f"MJX cannot run this model with impl {cfg['impl']}: {e}") from None
        self.dtype = self.mx.body_mass.dtype
        self.model_axes = jax.tree_util.tree_map(lambda _: None, self.mx).tree_replace(
            {k: 0 for k in self.dr_fields})
        self.upload_params()
        self.state = self.initial_state(template)
        self.template = template
        self.compile()

    # ----- pure functions (traced once by jit) -----

    def _select(self, mask, new, old):
        """Per-env choice between two batched pytrees (mask [N])."""
        jnp = self.jnp
        return self.jax.vmap(lambda c, a, b: self.jax.tree_util.tree_map(
            lambda x, y: jnp.where(c, x, y), a, b))(mask, new, old)

    def _reset(self, model_b, state, qpos, qvel, mask):
        """mj_resetData + qpos/qvel + mj_forward for the masked envs; clears their failure."""
        mjx, jnp = self.mjx, self.jnp
        template = self.template

        def one(m, q, v):
            return mjx.forward(m, template.replace(qpos=q, qvel=v))

        fresh = self.jax.vmap(one, in_axes=(self.model_axes, 0, 0))(model_b, qpos, qvel)
        zero_i = jnp.zeros_like(state["code"])
        return {
            "d": self._select(mask, fresh, state["d"]),
            "torque": jnp.where(mask[:, None], 0.0, state["torque"]),
            "code": jnp.where(mask, zero_i, state["code"]),
            "nsub": jnp.where(mask, zero_i, state["nsub"]),
            "fail_nsub": jnp.where(mask, zero_i, state["fail_nsub"]),
        }

    def _push(self, state, push):
        """qvel[0:3] += dv (world); qvel[3:6] += R(q)^T dw (root angular velocity is local)."""
        jnp = self.jnp
        d = state["d"]
        q = d.qpos[:, 3:7]
        w, u = q[:, :1], -q[:, 1:]  # conjugate: rotate by R^T
        dw = push[:, 3:]
        t = 2.0 * jnp.cross(u, dw)
        dw_local = dw + w * t + jnp.cross(u, t)
        qvel = d.qvel.at[:, 0:3].add(push[:, :3]).at[:, 3:6].add(dw_local)
        return dict(state, d=d.replace(qvel=qvel))

    def _control_step(self, model_b, state, targets, kp, kd, go):
        """`decimation` PD substeps for every env with go; a substep that produces a bad state
        is discarded and fails the env (code 1 qpos, 2 qvel, 3 qacc)."""
        jax, jnp, mjx = self.jax, self.jnp, self.mjx
        effort = jnp.asarray(self.cfg["effort"], dtype=self.dtype)

        def bad(x):
            return jnp.any(~jnp.isfinite(x) | (jnp.abs(x) > MAXVAL))

        def env(m, d, torque, code, nsub, fail_nsub, target, kp, kd, go):
            def substep(carry, _):
                d, torque, code, nsub, fail_nsub = carry
                run = go & (code == 0)
                tau = jnp.clip(kp * (target - d.qpos[7:]) - kd * d.qvel[6:], -effort, effort)
                nd = mjx.step(m, d.replace(ctrl=tau))
                c = jnp.where(bad(nd.qpos), 1, jnp.where(bad(nd.qvel), 2, jnp.where(bad(nd.qacc), 3, 0)))
                ok = run & (c == 0)
                failing = run & (c != 0)
                d = jax.tree_util.tree_map(lambda x, y: jnp.where(ok, x, y), nd, d)
                return (d, jnp.where(ok, tau, torque), jnp.where(failing, c, code),
                        nsub + ok, jnp.where(failing, nsub + 1, fail_nsub)), None

            carry, _ = jax.lax.scan(substep, (d, torque, code, nsub, fail_nsub), None,
                                    length=self.cfg["decimation"])
            return carry

        s = state
        d, torque, code, nsub, fail_nsub = jax.vmap(env, in_axes=(self.model_axes,) + (0,) * 9)(
            model_b, s["d"], s["torque"], s["code"], s["nsub"], s["fail_nsub"], targets, kp, kd, go)
        return {"d": d, "torque": torque, "code": code, "nsub": nsub, "fail_nsub": fail_nsub}

    def _contact_force(self, d):
        """Net world-frame contact force on bodies 1..30 from one env's current contacts."""
        jnp, mujoco = self.jnp, self.mujoco
        con = d._impl.contact
        efc_force = d._impl.efc_force
        pyramidal = self.model.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL
        world = jnp.zeros((con.dist.shape[0], 3), dtype=self.dtype)
        # Contact rows are laid out statically per condim; decode each group as
        # mj_contactForce does (pyramid edges -> normal and tangential components).
        for dim in np.unique(con.dim):
            idx = np.nonzero((con.dim == dim) & (con.efc_address >= 0))[0]
            if idx.size == 0:
                continue
            adr = con.efc_address[idx]
            if dim == 1:
                f = jnp.stack([efc_force[adr]] + [jnp.zeros(idx.size, self.dtype)] * 2, axis=1)
            elif pyramidal:
                edges = efc_force[adr[:, None] + np.arange(2 * (dim - 1))[None]]
                mu = con.friction[idx]
                f = jnp.stack([edges.sum(axis=1),
                               (edges[:, 0] - edges[:, 1]) * mu[:, 0],
                               (edges[:, 2] - edges[:, 3]) * mu[:, 1]], axis=1)
            else:
                f = efc_force[adr[:, None] + np.arange(3)[None]]
            # frame rows: normal (geom1 -> geom2), tangent 1, tangent 2; world = frame^T f.
            world = world.at[idx].set(jnp.einsum("ci,cij->cj", f, con.frame[idx]))
        body = jnp.asarray(self.model.geom_bodyid)[con.geom]
        out = jnp.zeros((NB + 1, 3), dtype=self.dtype)
        out = out.at[body[:, 1]].add(world).at[body[:, 0]].add(-world)
        return out[1:]

    def _observe(self, model_b, state):
        """Refreshes kinematics, com_pos, com_vel and packs the device outputs into one flat
        array (shared-memory order) plus an int block [N, 3] = (code, nsub, fail_nsub)."""
        jax, jnp, mjx = self.jax, self.jnp, self.mjx

        def kin(m, d):
            return mjx.com_vel(m, mjx.com_pos(m, mjx.kinematics(m, d)))

        d = jax.vmap(kin, in_axes=(self.model_axes, 0))(model_b, state["d"])
        state = dict(state, d=d)
        root = np.asarray(self.model.body_rootid)[1:]
        ang = d.cvel[:, 1:, :3]
        # mj_objectVelocity(mjOBJ_BODY, world): spatial velocity moved from the subtree CoM of
        # the body's root to the body's CoM.
        lin = d.cvel[:, 1:, 3:] + jnp.cross(ang, d.xipos[:, 1:] - d.subtree_com[:, root])
        if self.cfg["contact_forces"]:
            cf = jax.vmap(self._contact_force)(d)
        else:
            cf = jnp.zeros((self.n, NB, 3), dtype=self.dtype)
        parts = (d.qpos, d.qvel, state["torque"], d.xpos[:, 1:], d.xquat[:, 1:], lin, ang, cf)
        flat = jnp.concatenate([p.reshape(-1) for p in parts])
        ints = jnp.stack([state["code"], state["nsub"], state["fail_nsub"]], axis=1)
        return state, flat, ints

    def _sync(self, model_b, state, inp):
        state = self._push(state, inp[:, NJ:NJ + 6])
        return self._observe(model_b, state)

    def _step(self, model_b, state, inp, kp, kd):
        state = self._push(state, inp[:, NJ:NJ + 6])
        go = (inp[:, NJ + 6] > 0.5) & (state["code"] == 0)
        state = self._control_step(model_b, state, inp[:, :NJ], kp, kd, go)
        return self._observe(model_b, state)

    # ----- host side -----

    def initial_state(self, template):
        """Every env at the model's qpos0 at rest, before the reset function exists."""
        jax, jnp = self.jax, self.jnp
        d = jax.tree_util.tree_map(lambda x: jnp.repeat(x[None], self.n, axis=0), template)
        # Distinct buffers: the compiled functions donate (reuse) their state argument.
        zeros_i = lambda: jnp.zeros(self.n, dtype=jnp.int32)
        return {"d": d, "torque": jnp.zeros((self.n, NJ), self.dtype),
                "code": zeros_i(), "nsub": zeros_i(), "fail_nsub": zeros_i()}

    def upload_params(self):
        """Device copies of the batched model fields and gains (after a params update)."""
        self.model_b = self.mx.tree_replace({k: self.put(self.dr_host[k]) for k in self.dr_fields})
        self.kp = self.put(self.kp_host)
        self.kd = self.put(self.kd_host)

    def compile(self):
        """Compiles reset, sync and step once (ahead of time) and sets every env to qpos0 at
        rest, which also exercises all three before the first command."""
        jax, n = self.jax, self.n
        qpos0 = np.repeat(self.model.qpos0[None], n, axis=0)
        reset_args = (self.model_b, self.state, self.put(qpos0), self.put(np.zeros((n, NV))),
                      self.put(np.ones(n, bool), bool))
        t0 = time.perf_counter()
        self.reset_fn = jax.jit(self._reset, donate_argnums=1).lower(*reset_args).compile()
        self.state = self.reset_fn(*reset_args)
        inp = self.put(np.zeros((n, NJ + 7)))
        t1 = time.perf_counter()
        self.sync_fn = jax.jit(self._sync, donate_argnums=1).lower(
            self.model_b, self.state, inp).compile()
        t2 = time.perf_counter()
        self.step_fn = jax.jit(self._step, donate_argnums=1).lower(
            self.model_b, self.state, inp, self.kp, self.kd).compile()
        t3 = time.perf_counter()
        log(f"compiled reset {t1 - t0:.1f} s, sync {t2 - t1:.1f} s, step {t3 - t2:.1f} s")
        # Inactive envs: the step leaves the state as it is; then publish the initial outputs.
        self.state, _, _ = self.step_fn(self.model_b, self.state, inp, self.kp, self.kd)
        self.state, flat, ints = self.sync_fn(self.model_b, self.state, inp)
        self.write_outputs(flat, ints)

    def put(self, a, dtype=None):
        """Host array -> device array (the worker's float type unless `dtype` says otherwise)."""
        return self.jax.device_put(self.jnp.asarray(a, dtype=dtype or self.dtype), self.device)

    def apply_params(self, envs):
        """Domain randomisation from the nominal model for `envs` (C library's mj_setConst)."""
        p = self.views["params"]
        for e in envs:
            mass, com, mu = p[e, :NB], p[e, NB:NB + 3], p[e, NB + 3]
            kps, kds = p[e, NB + 4], p[e, NB + 5]
            if not (np.all(np.isfinite(mass)) and np.all(mass > 0)):
                raise CommandError(f"env {e}: mass_scale must be finite and positive")
            if not np.all(np.isfinite(com)):
                raise CommandError(f"env {e}: torso_com_offset must be finite")
            if not (math.isnan(mu) or (math.isfinite(mu) and mu >= 0)):
                raise CommandError(f"env {e}: friction must be NaN or finite and >= 0, got {mu}")
            if not (math.isfinite(kps) and kps >= 0 and math.isfinite(kds) and kds >= 0):
                raise CommandError(f"env {e}: kp_scale and kd_scale must be finite and >= 0")
        s = self.scratch
        for e in envs:
            mass, com, mu = p[e, :NB], p[e, NB:NB + 3], p[e, NB + 3]
            s.body_mass[:] = self.nominal["body_mass"]
            s.body_mass[1:] *= mass
            s.body_ipos[:] = self.nominal["body_ipos"]
            s.body_ipos[self.cfg["torso_body"]] += com
            s.geom_friction[:] = self.nominal["geom_friction"]
            if not math.isnan(mu):
                s.geom_friction[:, 0] = mu
            self.mujoco.mj_setConst(s, self.scratch_data)
            for k in self.dr_fields:
                self.dr_host[k][e] = getattr(s, k)
            self.kp_host[e] = self.cfg["kp"] * p[e, NB + 4]
            self.kd_host[e] = self.cfg["kd"] * p[e, NB + 5]
        self.upload_params()

    def command(self, name):
        v = self.views
        params = np.nonzero(v["params_flag"] != 0)[0]
        resets = np.nonzero(v["reset_flag"] != 0)[0]
        pushes = v["push_flag"] != 0
        if resets.size:
            q, qd = v["reset_qpos"][resets], v["reset_qvel"][resets]
            if not (np.all(np.isfinite(q)) and np.all(np.isfinite(qd))):
                raise CommandError(f"non-finite reset state for env(s) {resets.tolist()}")
        if pushes.any() and not np.all(np.isfinite(v["push"][pushes])):
            raise CommandError("non-finite push")
        inp = np.zeros((self.n, NJ + 7))
        if name == "step":
            inp[:, :NJ] = v["targets"]
            inp[:, NJ + 6] = v["active"] != 0
            if not np.all(np.isfinite(inp[:, :NJ][inp[:, NJ + 6] > 0])):
                raise CommandError("non-finite targets for an active env")
        inp[pushes, NJ:NJ + 6] = v["push"][pushes]

        if params.size:
            self.apply_params(params)
            v["params_flag"][:] = 0
        if resets.size:
            mask = np.zeros(self.n, bool)
            mask[resets] = True
            qpos = np.array(self.model.qpos0[None].repeat(self.n, axis=0))
            qvel = np.zeros((self.n, NV))
            qpos[resets], qvel[resets] = v["reset_qpos"][resets], v["reset_qvel"][resets]
            self.state = self.reset_fn(self.model_b, self.state, self.put(qpos), self.put(qvel),
                                       self.put(mask, bool))
            v["reset_flag"][:] = 0
        if pushes.any():
            v["push_flag"][:] = 0
        if name == "step":
            self.state, flat, ints = self.step_fn(self.model_b, self.state, self.put(inp), self.kp, self.kd)
        else:
            self.state, flat, ints = self.sync_fn(self.model_b, self.state, self.put(inp))
        self.write_outputs(flat, ints)

    def write_outputs(self, flat, ints):
        """One device-to-host copy per block, straight into shared memory."""
        v = self.views
        flat = np.asarray(flat)
        ints = np.asarray(ints)
        offset = 0
        for name in DEVICE_OUTPUTS:
            dst = v[name]
            dst[...] = flat[offset:offset + dst.size].reshape(dst.shape)
            offset += dst.size
        v["failed"][:] = ints[:, 0]
        v["time"][:] = ints[:, 1] * self.dt
        v["failed_time"][:] = np.where(ints[:, 0] != 0, ints[:, 2] * self.dt, 0.0)


def log(msg):
    print(f"[gpu_worker] {msg}", file=sys.stderr, flush=True)


def main():
    # Protocol lines go to a private duplicate of stdout; fd 1 itself now points at stderr so
    # that nothing else (e.g. MJX's import-time warnings) can corrupt the protocol stream.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def reply(line):
        proto.write(line + "\n")
        proto.flush()

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shm", required=True, help="shared-memory file created by the supervisor")
    args = parser.parse_args()

    line = sys.stdin.readline()
    if not line:
        return 0
    t0 = time.perf_counter()
    try:
        cfg = parse_init(line)
        mem, views = map_shm(args.shm, cfg["num_envs"])
        if cfg["device"] != "gpu":
            if cfg["device"] == "cpu":
                os.environ.setdefault("JAX_PLATFORMS", "cpu")
            # jaxlib 0.10's batched LAPACK kernels (the Cholesky factorisations of MJX's solver
            # and integrator) block a thread of XLA's CPU pool while their sub-batches queue in
            # the same pool: two at once deadlock a two-thread pool (N >= 64 on 2 cores hangs
            # within a few steps). XLA sizes that pool from NPROC when it is set.
            # The pool serves only the CPU backend, so `auto` sets it too (harmless on a GPU).
            os.environ.setdefault("NPROC", str(max(4, len(os.sched_getaffinity(0)))))
        if cfg["device"] != "cpu":
            # Leave GPU memory to the rest of the process tree unless the user said otherwise.
            os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        import jax
        jax.config.update("jax_enable_x64", cfg["x64"])
        import mujoco
        worker = Worker(cfg, views)
    except InitError as e:
        reply(json.dumps({"error": str(e)}))
        return 1
    except Exception as e:  # anything unexpected: traceback to the log, one line to Rust
        traceback.print_exc(file=sys.stderr)
        reply(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 1
    compile_s = time.perf_counter() - t0
    log(f"ready: {cfg['num_envs']} envs on {worker.device}, impl {cfg['impl']}, "
        f"x64={cfg['x64']}, {compile_s:.1f} s")
    reply(json.dumps({"ready": True, "backend": "mjx", "impl": cfg["impl"],
                      "device": str(worker.device), "jax": jax.__version__,
                      "mujoco": mujoco.__version__, "compile_s": round(compile_s, 3)}))

    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "close":
            reply("ok")
            break
        if cmd not in ("sync", "step"):
            reply(f"error unknown command {cmd!r}")
            continue
        try:
            worker.command(cmd)
        except CommandError as e:
            reply(f"error {e}")
            continue
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            reply("error " + f"{type(e).__name__}: {e}".replace("\n", " "))
            continue
        reply("ok")
    mem.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
