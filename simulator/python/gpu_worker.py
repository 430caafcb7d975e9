#!/usr/bin/env python3
"""MimicArena GPU simulation worker: N Unitree G1 environments on MuJoCo MJX or MuJoCo Warp.

This file is the protocol and the host side; the physics is ``mjx_physics.MjxPhysics`` (impl
"jax": MJX's JAX implementation, jit(vmap)) or ``warp_physics.WarpPhysics`` (impl "warp":
MuJoCo Warp, worlds batched by the library), with ``worker_common`` shared by all three. The Rust
supervisor writes the five files to one folder and starts ``python gpu_worker.py [--preload IMPL
--device DEVICE]``, writes one JSON init line to stdin, waits for the one-line JSON reply, then
sends one command per line (``sync``, ``step``,
``stats``, ``close``); every command gets exactly one reply line (``ok`` or ``error <message>``;
``stats`` answers ``stats {JSON}``: how many ``step`` and ``sync`` commands ran and the seconds
they spent in each phase of the worker, summed since start-up, see ``Worker.timings``, and for
MuJoCo Warp the physics' own counters, ``WarpPhysics.counters``). stdout
carries protocol lines only: file descriptor 1 is redirected to stderr at start-up, so any
library output lands in the log. EOF on stdin ends the worker (exit 0), as does ``close`` in
place of the init line.

``--check --preload IMPL --device DEVICE`` answers one JSON line, whether such a worker can
start with this Python (``check``), and exits: a server asks it before it serves.

``--preload IMPL`` imports the implementation's libraries (and for Warp initialises the device
``--device`` names) before the init line is read: a worker started ahead of need (a server's
spare, `gpu_spare.rs`) has done them by the time a lane sends its init. The supervisor sends a
worker only inits of the implementation and device it preloaded (JAX reads its platform when it
is imported, so an MJX init on another device would not get it). A spare may
also be sent a warm-up init first (``"warmup": true``, usually one env on a scratch file): the
worker starts that env completely, without answering, and drops it, so that the kernels are
loaded when the real init comes.

Init (one line):
  {"shm": PATH, "mjcf": PATH, "num_envs": N, "kp": [29], "kd": [29], "effort": [29], "decimation": 4,
   "torso_body": 16, "device": "auto"|"cpu"|"gpu", "impl": "jax"|"warp"|"stub", "x64": false,
   "contact_forces": true}
Reply: {"ready": true, "backend": "mjx"|"mujoco_warp"|"stub", "impl", "device", "library",
"mujoco", "compile_s", "startup": {phase: seconds}} or {"error": MESSAGE} and exit code 1. impl "warp" computes in float32
only (x64 is refused) and needs mujoco-warp and warp-lang (python/requirements-gpu.txt); impl
"stub" (stub_physics.py) is no physics at all, a benchmark of the host side.

Shared memory: PATH holds little-endian arrays in C order, back to back in the order below,
each N x width values (N = num_envs). The reset and params inputs and the three scalars after
the outputs are float64; the device outputs (qpos to contact_force, DEVICE_OUTPUTS) and the
command inputs (`inputs`, last) are float32, the precision the physics computes in, or float64
with x64: the inputs go to the physics as they lie, with no conversion here. So a file is
3476 N bytes, or 6056 N bytes with x64.

  | #  | array         | shape     | type    | dir | meaning                                   |
  |----|---------------|-----------|---------|-----|-------------------------------------------|
  | 1  | reset_flag    | [N]       | f64     | in  | 1 = reset from reset_qpos / reset_qvel    |
  | 2  | reset_qpos    | [N,36]    | f64     | in  |                                           |
  | 3  | reset_qvel    | [N,35]    | f64     | in  |                                           |
  | 4  | params_flag   | [N]       | f64     | in  | 1 = apply params                          |
  | 5  | params        | [N,36]    | f64     | in  | mass_scale 30, torso_com_offset 3,        |
  |    |               |           |         |     | friction 1 (NaN = model's), kp_scale,     |
  |    |               |           |         |     | kd_scale                                  |
  | 6  | qpos          | [N,36]    | f32/f64 | out |                                           |
  | 7  | qvel          | [N,35]    | f32/f64 | out |                                           |
  | 8  | torque        | [N,29]    | f32/f64 | out | clamped torques of the last substep       |
  | 9  | body_pos      | [N,30,3]  | f32/f64 | out | xpos of bodies 1..30                      |
  | 10 | body_quat     | [N,30,4]  | f32/f64 | out | xquat (wxyz)                              |
  | 11 | body_lin_vel  | [N,30,3]  | f32/f64 | out | world, at each body's CoM                 |
  | 12 | body_ang_vel  | [N,30,3]  | f32/f64 | out | world                                     |
  | 13 | contact_force | [N,30,3]  | f32/f64 | out | net world contact force, last substep     |
  | 14 | failed        | [N]       | f64     | out | 0 ok, 1 bad qpos, 2 bad qvel, 3 bad qacc, |
  |    |               |           |         |     | 4-7 a non-finite input (push, go flag,    |
  |    |               |           |         |     | targets, feed-forward; worker_common)     |
  | 15 | failed_time   | [N]       | f64     | out | sim time at which the bad state appeared  |
  |    |               |           |         |     | (a bad input: the env's time before it)   |
  | 16 | time          | [N]       | f64     | out | sim time since reset                      |
  | 17 | inputs        | [N,65]    | f32/f64 | in  | worker_common's columns: joint position   |
  |    |               |           |         |     | targets (rad) 29, push dv then dw (world) |
  |    |               |           |         |     | 6 (zero: none), go (1 = advance this env  |
  |    |               |           |         |     | on `step`) 1, feed-forward torques (N m,  |
  |    |               |           |         |     | added to PD) 29                           |

Within a command the worker applies params, then resets, then pushes (then, for `step`, the
control step), writes every output array, and clears the reset and params flags it consumed.
`inputs` is the supervisor's: it clears a push once the command that carried it is answered.

Physics equals MimicArena's CPU backend (simulator/src/handler/mujoco.rs): one control step is
`decimation` substeps of tau = clip(kp (target - q) - kd qdot + ff, -effort, effort) followed by
mj_step; afterwards kinematics, com_pos and com_vel refresh the body quantities (contacts and
contact forces stay those of the last substep, as after MuJoCo's mj_step). Domain
randomisation starts from the nominal model each time; the MuJoCo C library's mj_setConst
recomputes the derived constants on the host, and every per-env model field (body_mass,
body_ipos, geom_friction, body_subtreemass, body_invweight0, dof_invweight0) is a batched
input of the physics (vmapped on JAX, a world-batched model field on Warp).
"""
import time

# The module's own imports are part of the start-up a lane waits for (the ready reply's
# `python_imports_s`, with the MuJoCo bindings' import in Worker).
_IMPORTS_BEGAN = time.perf_counter()

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402

import numpy as np  # noqa: E402

# The physics modules sit beside this script (also under PYTHONSAFEPATH, which would leave the
# script's folder off sys.path).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from worker_common import (DEVICE_OUTPUTS, DR_FIELDS, INP_WIDTH, NB, NJ, NQ, NV, CommandError,  # noqa: E402
                           InitError, log)

_MODULE_IMPORTS_S = time.perf_counter() - _IMPORTS_BEGAN

NPARAMS = NB + 3 + 1 + 1 + 1
# Threads for the host-side DR of large resets (mj_setConst per env).
MAX_DR_THREADS = 16

# (name, per-env shape) in shared-memory order; outputs start at "qpos".
LAYOUT = (
    ("reset_flag", ()),
    ("reset_qpos", (NQ,)),
    ("reset_qvel", (NV,)),
    ("params_flag", ()),
    ("params", (NPARAMS,)),
) + DEVICE_OUTPUTS + (
    ("failed", ()),
    ("failed_time", ()),
    ("time", ()),
    # Last: its odd width (65) never misaligns a float64 array after it.
    ("inputs", (INP_WIDTH,)),
)
# What lies in shared memory in the physics' own type.
PHYSICS_TYPED = frozenset(name for name, _ in DEVICE_OUTPUTS) | {"inputs"}


def output_dtype(x64):
    """The type of the device outputs and the command inputs in shared memory: what the physics
    computes in. Widening float32 to float64 on the way out, or narrowing it on the way in,
    would copy and convert twice the bytes for nothing."""
    return np.dtype("<f8" if x64 else "<f4")


def _dtype(name, x64):
    return output_dtype(x64) if name in PHYSICS_TYPED else np.dtype("<f8")


def shm_size(num_envs, x64):
    """Bytes of the shared-memory file for `num_envs` environments."""
    return num_envs * sum(math.prod(shape) * _dtype(name, x64).itemsize for name, shape in LAYOUT)


def map_shm(path, num_envs, x64):
    """Maps the shared-memory file and returns (map, {name: [N, ...] view}); "_outputs" is the
    device outputs as one flat block (DEVICE_OUTPUTS order, back to back in LAYOUT), "_file"
    the whole map."""
    expected = shm_size(num_envs, x64)
    try:
        actual = os.path.getsize(path)
    except OSError as e:
        raise InitError(f"shared memory file {path}: {e.strerror}") from None
    if actual != expected:
        raise InitError(
            f"shared memory file {path} has {actual} bytes, expected {expected} "
            f"(num_envs={num_envs}, x64={x64}: {expected // num_envs} bytes per env)")
    mem = np.memmap(path, dtype=np.uint8, mode="r+", shape=(expected,))
    views, offset, spans = {}, 0, {}
    for name, shape in LAYOUT:
        dtype = _dtype(name, x64)
        size = num_envs * math.prod(shape) * dtype.itemsize
        views[name] = mem[offset:offset + size].view(dtype).reshape((num_envs,) + shape)
        spans[name] = (offset, offset + size)
        offset += size
    first, last = DEVICE_OUTPUTS[0][0], DEVICE_OUTPUTS[-1][0]
    views["_outputs"] = mem[spans[first][0]:spans[last][1]].view(output_dtype(x64))
    views["_file"] = mem
    return mem, views


def parse_init(line):
    """Validates the init message; returns it as a dict with typed values."""
    try:
        msg = json.loads(line)
    except json.JSONDecodeError as e:
        raise InitError(f"init line is not JSON: {e}") from None
    if not isinstance(msg, dict):
        raise InitError("init line must be a JSON object")
    required = ("shm", "mjcf", "num_envs", "kp", "kd", "effort")
    missing = [k for k in required if k not in msg]
    if missing:
        raise InitError(f"init message lacks {', '.join(missing)}")
    cfg = {
        "shm": msg["shm"],
        "mjcf": msg["mjcf"],
        "num_envs": msg["num_envs"],
        "decimation": msg.get("decimation", 4),
        "torso_body": msg.get("torso_body", 16),
        "device": msg.get("device", "cpu"),
        "impl": msg.get("impl", "jax"),
        "x64": msg.get("x64", False),
        "contact_forces": msg.get("contact_forces", True),
    }
    if not isinstance(cfg["shm"], str):
        raise InitError(f"shm must be the shared memory file's path, got {cfg['shm']!r}")
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
    if cfg["impl"] not in ("jax", "warp", "stub"):
        raise InitError(f"unknown impl {cfg['impl']!r} (expected jax, warp or stub)")
    for key in ("x64", "contact_forces"):
        if not isinstance(cfg[key], bool):
            raise InitError(f"{key} must be true or false")
    return cfg


class Worker:
    """The host side of N environments: validates each command's inputs, computes domain
    randomisation with the MuJoCo C library, and hands batched inputs to the physics
    implementation (MjxPhysics or WarpPhysics), whose outputs it writes to shared memory."""

    def __init__(self, cfg, views):
        t0 = time.perf_counter()
        import mujoco

        python_imports_s = _MODULE_IMPORTS_S + time.perf_counter() - t0
        self.mujoco = mujoco
        self.cfg, self.views = cfg, views
        n = self.n = cfg["num_envs"]
        began = time.perf_counter()
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
        # One scratch model per thread: the C library releases the GIL in mj_setConst, so the
        # envs of a large DR reset are spread over the machine's cores (about 70 us each).
        self.threads = max(1, min(len(os.sched_getaffinity(0)), MAX_DR_THREADS))
        self.scratch = [mujoco.MjModel.from_xml_path(cfg["mjcf"]) for _ in range(self.threads)]
        self.scratch_data = [mujoco.MjData(m) for m in self.scratch]
        self.pool = ThreadPoolExecutor(self.threads, "dr") if self.threads > 1 else None
        # The constants of the nominal parameters, computed once the same way: every env reset
        # without DR of the body (DR level 0; training's resets) copies them instead of
        # running mj_setConst (about 70 us per env).
        self._derive_constants(0, np.ones(NB), np.zeros(3), math.nan)
        self.nominal_constants = {f: getattr(self.scratch[0], f).copy() for f in DR_FIELDS}
        self.dr_host = {k: np.repeat(getattr(model, k)[None], n, axis=0) for k in DR_FIELDS}
        self.kp_host = np.repeat(cfg["kp"][None], n, axis=0)
        self.kd_host = np.repeat(cfg["kd"][None], n, axis=0)
        # The model, its scratch copies for DR and the nominal constants.
        host_s = time.perf_counter() - began
        t0 = time.perf_counter()
        if cfg["impl"] == "warp":
            try:
                from warp_physics import WarpPhysics as Physics
            except ImportError as e:
                raise InitError(f"impl warp needs mujoco-warp and warp-lang in this Python: {e}") from None
        elif cfg["impl"] == "stub":
            from stub_physics import StubPhysics as Physics
        else:
            from mjx_physics import MjxPhysics as Physics
        import_s = time.perf_counter() - t0
        # The device outputs are back to back in shared memory (LAYOUT): the physics writes
        # them there in one copy.
        self.outputs = views["_outputs"]
        t0 = time.perf_counter()
        self.physics = Physics(cfg, model, self.dr_host, self.kp_host, self.kd_host)
        # MuJoCo Warp copies the inputs and outputs straight from and into the shared file.
        if hasattr(self.physics, "share"):
            self.physics.share(views["_file"])
        # Where the start-up went, for the ready reply: the physics library's import, then the
        # implementation's own phases where it times them, else its whole construction.
        self.startup = {"python_imports_s": python_imports_s, "host_s": host_s, "import_s": import_s}
        self.startup.update(getattr(self.physics, "startup", None) or
                            {"physics_s": time.perf_counter() - t0})
        # Where the commands' time goes (the `stats` reply): counts, then seconds summed over
        # every command since start-up. The worker's own phases are `inputs_s` (reading the
        # flags and checking reset states; the physics checks the command inputs on the device),
        # `params_s` (DR's derived constants), `resets_s`, `advance_s` (the physics' call: inputs
        # to the device, the launches, the outputs copied back and waited for) and `ints_s`
        # (failure codes and times written);
        # the physics adds its own split of `advance_s` (`physics.timings`).
        self.timings = {"step": 0, "sync": 0, "inputs_s": 0.0, "params_s": 0.0, "resets_s": 0.0,
                        "advance_s": 0.0, "ints_s": 0.0}
        # Every env is at qpos0 at rest: one inactive step and a sync exercise both paths before
        # the first command and publish the initial outputs.
        t0 = time.perf_counter()
        # On zero inputs (no env goes, no push): a worker started again after a crash finds the
        # supervisor's inputs for its first command already written, and must not apply them.
        idle = np.zeros_like(views["inputs"])
        self.physics.advance(idle, True, self.outputs)
        self.write_ints(self.physics.advance(idle, False, self.outputs))
        self.startup["first_commands_s"] = time.perf_counter() - t0

    def apply_params(self, envs):
        """Domain randomisation from the nominal model for `envs` (C library's mj_setConst)."""
        p = self.views["params"]
        rows = p[envs]
        mass, com, mu = rows[:, :NB], rows[:, NB:NB + 3], rows[:, NB + 3]
        gains = rows[:, NB + 4:NB + 6]
        checks = (
            (np.isfinite(mass).all(axis=1) & (mass > 0).all(axis=1), "mass_scale must be finite and positive"),
            (np.isfinite(com).all(axis=1), "torso_com_offset must be finite"),
            (np.isnan(mu) | (np.isfinite(mu) & (mu >= 0)), "friction must be NaN or finite and >= 0, got {mu}"),
            ((np.isfinite(gains) & (gains >= 0)).all(axis=1), "kp_scale and kd_scale must be finite and >= 0"),
        )
        bad = ~np.logical_and.reduce([ok for ok, _ in checks])
        if bad.any():
            k = int(np.argmax(bad))  # the first env with a bad value, named by its first one
            message = next(m for ok, m in checks if not ok[k])
            raise CommandError(f"env {envs[k]}: " + message.format(mu=mu[k]))
        self.kp_host[envs] = self.cfg["kp"] * gains[:, :1]
        self.kd_host[envs] = self.cfg["kd"] * gains[:, 1:]
        nominal = (mass == 1.0).all(axis=1) & (com == 0.0).all(axis=1) & np.isnan(mu)
        for f in DR_FIELDS:
            self.dr_host[f][envs[nominal]] = self.nominal_constants[f]
        derive = envs[~nominal]
        if self.pool is None or len(derive) < 2 * self.threads:
            self._set_const(0, derive)
        else:
            parts = np.array_split(derive, self.threads)
            for done in [self.pool.submit(self._set_const, k, part) for k, part in enumerate(parts)]:
                done.result()
        self.physics.set_params(self.dr_host, self.kp_host, self.kd_host, envs)

    def _set_const(self, k, envs):
        """The derived constants of `envs` on scratch model `k` (each env's from the nominal
        model and its own parameters only, so the split over threads changes nothing)."""
        p = self.views["params"]
        for e in envs:
            self._derive_constants(k, p[e, :NB], p[e, NB:NB + 3], p[e, NB + 3])
            for f in DR_FIELDS:
                self.dr_host[f][e] = getattr(self.scratch[k], f)

    def _derive_constants(self, k, mass, com, mu):
        """mj_setConst on scratch model `k` with the nominal model's masses scaled by `mass`
        (per body), the torso's centre of mass moved by `com` and the friction `mu` (NaN: the
        nominal one)."""
        s = self.scratch[k]
        s.body_mass[:] = self.nominal["body_mass"]
        s.body_mass[1:] *= mass
        s.body_ipos[:] = self.nominal["body_ipos"]
        s.body_ipos[self.cfg["torso_body"]] += com
        s.geom_friction[:] = self.nominal["geom_friction"]
        if not math.isnan(mu):
            s.geom_friction[:, 0] = mu
        self.mujoco.mj_setConst(s, self.scratch_data[k])

    def stats(self):
        """The `stats` reply's object: the worker's timings and the physics' own split."""
        out = dict(self.timings)
        out.update(getattr(self.physics, "timings", {}))
        if hasattr(self.physics, "counters"):
            out.update(self.physics.counters())
        return out

    def command(self, name):
        t0 = time.perf_counter()
        v = self.views
        params = np.nonzero(v["params_flag"] != 0)[0]
        resets = np.nonzero(v["reset_flag"] != 0)[0]
        if resets.size:
            q, qd = v["reset_qpos"][resets], v["reset_qvel"][resets]
            if not (np.all(np.isfinite(q)) and np.all(np.isfinite(qd))):
                raise CommandError(f"non-finite reset state for env(s) {resets.tolist()}")
        inp = v["inputs"]
        # The inputs are checked by the physics, per env, where they are used (on the device;
        # worker_common.input_codes): an env whose push, go flag, targets or feed-forward
        # torques are not finite fails alone with its code, at no cost here.
        t1 = time.perf_counter()
        if params.size:
            self.apply_params(params)
            v["params_flag"][:] = 0
        t2 = time.perf_counter()
        if resets.size:
            mask = np.zeros(self.n, bool)
            mask[resets] = True
            qpos = np.array(self.model.qpos0[None].repeat(self.n, axis=0))
            qvel = np.zeros((self.n, NV))
            qpos[resets], qvel[resets] = v["reset_qpos"][resets], v["reset_qvel"][resets]
            self.physics.reset(mask, qpos, qvel)
            v["reset_flag"][:] = 0
        t3 = time.perf_counter()
        ints = self.physics.advance(inp, name == "step", self.outputs)
        t4 = time.perf_counter()
        self.write_ints(ints)
        t = self.timings
        t[name] += 1
        t["inputs_s"] += t1 - t0
        t["params_s"] += t2 - t1
        t["resets_s"] += t3 - t2
        t["advance_s"] += t4 - t3
        t["ints_s"] += time.perf_counter() - t4

    def write_ints(self, ints):
        """Failure codes and substep counts [N, 3] (code, nsub, fail_nsub), into shared memory;
        the physics has written the packed outputs there itself."""
        v = self.views
        # In place, no temporaries. `failed_time` is read only where `failed` is not 0 (the
        # implementations clear both at a reset and set both at a failure).
        np.copyto(v["failed"], ints[:, 0])
        np.multiply(ints[:, 1], self.dt, out=v["time"])
        np.multiply(ints[:, 2], self.dt, out=v["failed_time"])


def preload(impl, device):
    """Imports `impl`'s libraries (and the MuJoCo bindings) and, for Warp, initialises `device`;
    returns the seconds it took. A failure is only logged: the init's own imports meet it again
    and answer it (Python does not keep a module whose import failed)."""
    t0 = time.perf_counter()
    try:
        import mujoco  # noqa: F401
        if impl == "warp":
            import warp_physics
            warp_physics.preload(device)
        elif impl == "jax":
            import mjx_physics
            mjx_physics.preload(device)
        else:
            import stub_physics  # noqa: F401
    except Exception as e:  # noqa: BLE001 (reported again by the init)
        log(f"preload of {impl} on {device} failed: {type(e).__name__}: {e}")
        return time.perf_counter() - t0
    seconds = time.perf_counter() - t0
    # The line benches wait for (a server's spare is ready for a lane).
    log(f"preloaded {impl} on {device} in {seconds:.2f} s")
    return seconds


def check(impl, device):
    """`--check`: whether a worker of `impl` can start on `device` with this Python, asked by a
    server before it serves (`gpu_process::check_worker`): the implementation's imports and its
    device (JAX's backend too, which a preload leaves to the first computation). Returns the one
    reply line's object, {"ok": true, "device", "library", "mujoco", "seconds"} or {"error",
    "cause": "device" (no such device) or "python" (an import failed)}."""
    t0 = time.perf_counter()
    try:
        import mujoco
        if impl == "warp":
            import warp_physics
            dev, library = warp_physics.preload(device)
        elif impl == "jax":
            import mjx_physics
            dev, library = mjx_physics.check(device)
        else:
            import stub_physics  # noqa: F401
            dev, library = "host", "stub (no physics)"
    except InitError as e:  # the device asked for is not there; the imports went well
        return {"error": str(e), "cause": "device"}
    except Exception as e:  # noqa: BLE001 (the answer is the error itself)
        traceback.print_exc(file=sys.stderr)
        return {"error": f"{type(e).__name__}: {e}", "cause": "python"}
    return {"ok": True, "device": str(dev), "library": library, "mujoco": mujoco.__version__,
            "seconds": round(time.perf_counter() - t0, 3)}


def _is_warmup(line):
    """Whether `line` is a warm-up init: a JSON object with "warmup": true."""
    try:
        msg = json.loads(line)
    except json.JSONDecodeError:
        return False
    return isinstance(msg, dict) and msg.get("warmup") is True


def warm_up(line):
    """Runs the warm-up init `line` (a whole start of a worker, usually of one env, on a scratch
    shared file) and drops it: the kernels it loaded and compiled stay loaded in this process
    for the real init. Returns its seconds; a failure ends the process."""
    t0 = time.perf_counter()
    try:
        cfg = parse_init(line)
        mem, views = map_shm(cfg["shm"], cfg["num_envs"], cfg["x64"])
        worker = Worker(cfg, views)
        worker.command("sync")
        close = getattr(worker.physics, "close", None)
        if close is not None:
            close()
        del worker, views, mem
    except Exception as e:  # noqa: BLE001
        # A spare whose warm-up failed ends (its device may be left in an error state): the
        # supervisor passes it over and starts a worker of its own, whose init meets the same
        # failure, if it is one, and answers it.
        traceback.print_exc(file=sys.stderr)
        log(f"warm-up failed: {type(e).__name__}: {e}; this spare ends")
        sys.stderr.flush()
        os._exit(1)
    gc.collect()
    seconds = time.perf_counter() - t0
    log(f"warmed up in {seconds:.2f} s")
    return seconds


def main():
    # Protocol lines go to a private duplicate of stdout; fd 1 itself now points at stderr so
    # that nothing else (e.g. MJX's import-time warnings) can corrupt the protocol stream.
    # UTF-8 whatever the locale (the supervisor reads UTF-8); what cannot be encoded is escaped.
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8", errors="backslashreplace")
    os.dup2(2, 1)

    def reply(line):
        proto.write(line + "\n")
        proto.flush()

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preload", choices=("jax", "warp", "stub"),
                        help="import this implementation's libraries before the init line comes")
    parser.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                        help="with --preload warp: the device to initialise ahead")
    parser.add_argument("--check", action="store_true",
                        help="with --preload: import, start the device, answer one JSON line "
                             "and exit (0 when a worker can start, else 1)")
    args = parser.parse_args()
    if args.check:
        if not args.preload:
            parser.error("--check needs --preload IMPL")
        answer = check(args.preload, args.device)
        reply(json.dumps(answer))
        sys.stderr.flush()
        os._exit(0 if answer.get("ok") else 1)
    preload_s = preload(args.preload, args.device) if args.preload else None
    warmup_s = None

    while True:
        line = sys.stdin.readline()
        if not line or line.strip() == "close":
            # Without the interpreter's teardown, which takes over a second with Warp loaded.
            sys.stderr.flush()
            os._exit(0)
        if not _is_warmup(line):
            break
        # A warm-up init (a spare's, never answered): the real init that follows finds every
        # kernel the warm-up loaded.
        warmup_s = warm_up(line)
    t0 = time.perf_counter()
    try:
        cfg = parse_init(line)
        mem, views = map_shm(cfg["shm"], cfg["num_envs"], cfg["x64"])
        init_and_map_s = time.perf_counter() - t0
        worker = Worker(cfg, views)
        worker.startup["init_and_map_s"] = init_and_map_s
        if preload_s is not None:
            # What was done before the init line was read: the module's own imports and the
            # preload, then a warm-up; what the init then did stays in the other phases.
            worker.startup["python_imports_s"] -= _MODULE_IMPORTS_S
            worker.startup["preload_s"] = _MODULE_IMPORTS_S + preload_s
        if warmup_s is not None:
            worker.startup["warmup_s"] = warmup_s
    except InitError as e:
        reply(json.dumps({"error": str(e)}))
        return 1
    except Exception as e:  # anything unexpected: traceback to the log, one line to Rust
        traceback.print_exc(file=sys.stderr)
        reply(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 1
    compile_s = time.perf_counter() - t0
    physics = worker.physics
    log(f"ready: {cfg['num_envs']} envs on {physics.device}, impl {cfg['impl']} "
        f"({physics.library}), x64={cfg['x64']}, {compile_s:.1f} s")
    reply(json.dumps({"ready": True, "backend": physics.backend, "impl": cfg["impl"],
                      "device": str(physics.device), "library": physics.library,
                      "mujoco": worker.mujoco.__version__, "compile_s": round(compile_s, 3),
                      "startup": {k: round(v, 3) for k, v in worker.startup.items()}}))

    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "close":
            reply("ok")
            # Nothing is left to save (the supervisor owns the shared memory): leave without
            # the interpreter's teardown, which with Warp loaded (its modules and CUDA graphs
            # released one by one) took over a second, the supervisor waiting all along.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        if cmd == "stats":
            reply("stats " + json.dumps(worker.stats()))
            continue
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
