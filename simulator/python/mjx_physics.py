"""The GPU worker's physics on MuJoCo MJX's JAX implementation (``impl = "jax"``).

N environments are one batched MJX ``Data`` pytree; reset, sync and step are ``jit(vmap(...))``
functions compiled ahead of time when the worker starts. Per-env model fields (domain
randomisation) are batched inputs of those functions (``in_axes`` 0), every other model field is
shared. The interface is the one ``gpu_worker.Worker`` drives: ``set_params``, ``reset`` and
``advance``.
"""
import os
import time

import numpy as np

from worker_common import (DR_FIELDS, FF0, INP_WIDTH, MAXVAL, NB, NJ, NV, InitError, input_codes,
                           log)


def prepare_environment(cfg):
    """Environment variables JAX reads at import time; call before anything imports JAX."""
    if cfg["device"] != "gpu":
        if cfg["device"] == "cpu":
            os.environ.setdefault("JAX_PLATFORMS", "cpu")
        # jaxlib 0.10's batched LAPACK kernels (the Cholesky factorisations of MJX's solver and
        # integrator) block a thread of XLA's CPU pool while their sub-batches queue in the same
        # pool: two at once deadlock a two-thread pool (N >= 64 on 2 cores hangs within a few
        # steps). XLA sizes that pool from NPROC when it is set. The pool serves only the CPU
        # backend, so `auto` sets it too (harmless on a GPU).
        os.environ.setdefault("NPROC", str(max(4, len(os.sched_getaffinity(0)))))
    if cfg["device"] != "cpu":
        # Leave GPU memory to the rest of the process tree unless the user said otherwise.
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def preload(device):
    """Imports JAX and MJX ahead of the init line (`gpu_worker.preload`), with the environment
    variables of `device`. JAX's backend starts with the first computation, not here."""
    prepare_environment({"device": device})
    import jax  # noqa: F401
    from mujoco import mjx  # noqa: F401


def check(device):
    """`preload`, then JAX's backend started on `device` as the physics will start it
    (`gpu_worker.check`): returns the device and the libraries' versions."""
    preload(device)
    import jax
    import mujoco

    return jax_device(jax, device), f"mujoco-mjx {mujoco.__version__}, jax {jax.__version__}"


def jax_device(jax, device):
    """JAX's device for the init's `device`: auto = JAX's default backend, the GPU when it sees
    one, else its CPU."""
    try:
        return jax.devices()[0] if device == "auto" else jax.devices(device)[0]
    except RuntimeError as e:
        raise InitError(f"no JAX {device} device: {e}") from None


class MjxPhysics:
    """Batched MJX state of N environments and the compiled functions that advance it."""

    backend = "mjx"

    def __init__(self, cfg, model, dr_host, kp_host, kd_host):
        prepare_environment(cfg)
        import jax

        jax.config.update("jax_enable_x64", cfg["x64"])
        import jax.numpy as jnp
        import mujoco
        from mujoco import mjx

        self.jax, self.jnp, self.mujoco, self.mjx = jax, jnp, mujoco, mjx
        self.cfg, self.model = cfg, model
        self.n = cfg["num_envs"]
        self.timings = {"launch_s": 0.0, "copy_out_wait_s": 0.0}
        self.device = jax_device(jax, cfg["device"])
        self.library = f"mujoco-mjx {mujoco.__version__}, jax {jax.__version__}"
        try:
            self.mx = mjx.put_model(model, device=self.device, impl="jax")
            template = mjx.make_data(self.mx, device=self.device, impl="jax")
        except (NotImplementedError, RuntimeError, ValueError) as e:
            raise InitError(f"MJX cannot run this model: {e}") from None
        self.dtype = self.mx.body_mass.dtype
        self.model_axes = jax.tree_util.tree_map(lambda _: None, self.mx).tree_replace(
            {k: 0 for k in DR_FIELDS})
        self.set_params(dr_host, kp_host, kd_host)
        self.template = template
        self.state = self.initial_state(template)
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

    def _control_step(self, model_b, state, targets, ff, kp, kd, go):
        """`decimation` PD substeps for every env with go; a substep that produces a bad state
        is discarded and fails the env (code 1 qpos, 2 qvel, 3 qacc)."""
        jax, jnp, mjx = self.jax, self.jnp, self.mjx
        effort = jnp.asarray(self.cfg["effort"], dtype=self.dtype)

        def bad(x):
            return jnp.any(~jnp.isfinite(x) | (jnp.abs(x) > MAXVAL))

        def env(m, d, torque, code, nsub, fail_nsub, target, ff, kp, kd, go):
            def substep(carry, _):
                d, torque, code, nsub, fail_nsub = carry
                run = go & (code == 0)
                tau = jnp.clip(kp * (target - d.qpos[7:]) - kd * d.qvel[6:] + ff, -effort, effort)
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
        d, torque, code, nsub, fail_nsub = jax.vmap(env, in_axes=(self.model_axes,) + (0,) * 10)(
            model_b, s["d"], s["torque"], s["code"], s["nsub"], s["fail_nsub"], targets, ff, kp, kd, go)
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
        parts = (d.qpos, d.qvel, state["torque"], d.xpos[:, 1:], d.xquat[:, 1:], lin, ang)
        if self.cfg["contact_forces"]:
            # Last in the block; without them the block stops short (worker_common.copied_outputs).
            parts += (jax.vmap(self._contact_force)(d),)
        flat = jnp.concatenate([p.reshape(-1) for p in parts])
        ints = jnp.stack([state["code"], state["nsub"], state["fail_nsub"]], axis=1)
        return state, flat, ints

    def _screen(self, state, inp, step):
        """Envs whose command inputs are not finite (worker_common.input_codes) fail with that
        code before anything uses them, their state untouched; returns the state and the
        pushes, zero for those envs."""
        jnp = self.jnp
        c = input_codes(inp, step, jnp)
        failing = (c != 0) & (state["code"] == 0)
        state = dict(state, code=jnp.where(failing, c, state["code"]),
                     fail_nsub=jnp.where(failing, state["nsub"], state["fail_nsub"]))
        return state, jnp.where((c != 0)[:, None], 0.0, inp[:, NJ:NJ + 6])

    def _sync(self, model_b, state, inp):
        state, push = self._screen(state, inp, step=False)
        state = self._push(state, push)
        return self._observe(model_b, state)

    def _step(self, model_b, state, inp, kp, kd):
        state, push = self._screen(state, inp, step=True)
        state = self._push(state, push)
        go = (inp[:, NJ + 6] > 0.5) & (state["code"] == 0)
        state = self._control_step(model_b, state, inp[:, :NJ], inp[:, FF0:FF0 + NJ], kp, kd, go)
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

    def set_params(self, dr_host, kp_host, kd_host, envs=None):
        """Device copies of the batched model fields and gains (after a params update of `envs`;
        every row is copied)."""
        self.model_b = self.mx.tree_replace({k: self.put(dr_host[k]) for k in DR_FIELDS})
        self.kp = self.put(kp_host)
        self.kd = self.put(kd_host)

    def compile(self):
        """Compiles reset, sync and step once (ahead of time); every env ends at qpos0 at rest."""
        jax, n = self.jax, self.n
        qpos0 = np.repeat(self.model.qpos0[None], n, axis=0)
        reset_args = (self.model_b, self.state, self.put(qpos0), self.put(np.zeros((n, NV))),
                      self.put(np.ones(n, bool), bool))
        t0 = time.perf_counter()
        self.reset_fn = jax.jit(self._reset, donate_argnums=1).lower(*reset_args).compile()
        self.state = self.reset_fn(*reset_args)
        inp = self.put(np.zeros((n, INP_WIDTH)))
        t1 = time.perf_counter()
        self.sync_fn = jax.jit(self._sync, donate_argnums=1).lower(
            self.model_b, self.state, inp).compile()
        t2 = time.perf_counter()
        self.step_fn = jax.jit(self._step, donate_argnums=1).lower(
            self.model_b, self.state, inp, self.kp, self.kd).compile()
        t3 = time.perf_counter()
        log(f"compiled reset {t1 - t0:.1f} s, sync {t2 - t1:.1f} s, step {t3 - t2:.1f} s")

    def put(self, a, dtype=None):
        """Host array -> device array (the worker's float type unless `dtype` says otherwise)."""
        return self.jax.device_put(self.jnp.asarray(a, dtype=dtype or self.dtype), self.device)

    def reset(self, mask, qpos, qvel):
        self.state = self.reset_fn(self.model_b, self.state, self.put(qpos), self.put(qvel),
                                   self.put(mask, bool))

    def advance(self, inp, step, dest):
        """Pushes, then (for `step`) one control step; writes the packed outputs into `dest`
        (shared memory, the worker's float type) and returns the ints [N, 3] (code, nsub,
        fail_nsub)."""
        t0 = time.perf_counter()
        if step:
            self.state, flat, ints = self.step_fn(self.model_b, self.state, self.put(inp), self.kp, self.kd)
        else:
            self.state, flat, ints = self.sync_fn(self.model_b, self.state, self.put(inp))
        t1 = time.perf_counter()
        np.copyto(dest[:flat.size], np.asarray(flat), casting="no")
        ints = np.asarray(ints)
        # Seconds summed over the commands (the worker's `stats`): the call that dispatches the
        # inputs and the jitted function, then the wait for its outputs and their copy.
        self.timings["launch_s"] += t1 - t0
        self.timings["copy_out_wait_s"] += time.perf_counter() - t1
        return ints
