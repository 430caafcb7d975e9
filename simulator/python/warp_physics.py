"""The GPU worker's physics on MuJoCo Warp (``impl = "warp"``).

MuJoCo Warp batches worlds itself: one ``Data`` holds N worlds (a leading world axis, contacts
pooled across worlds with a world id), and every call steps all of them. This module therefore
keeps the per-env semantics of the JAX path with its own kernels:

- a control step is ``decimation`` substeps of: PD torques into ``ctrl`` and a copy of the state
  (one kernel), ``mujoco_warp.step`` for all worlds, then a check that puts back the state of
  every world that was not running or whose substep produced a bad qpos / qvel / qacc (and
  fails the latter), so inactive and failed envs stay exactly where they were, as on the CPU
  backend. The worker's own work is fused into as few kernels as it can be (a command's
  unpacking and push; the PD and the save; the check, the counters and the restore; the
  outputs and the ints), since each node of a CUDA graph costs microseconds of its own;
- domain randomisation is MuJoCo Warp's batched model fields (leading world axis) for
  ``DR_FIELDS``, computed on the host with the C library's ``mj_setConst`` like the JAX path;
- outputs are packed on the device into one float32 block, copied by one device-to-host copy
  straight into the shared memory the caller passes (page-locked with ``cuMemHostRegister`` on
  a CUDA device, so the copy is a DMA at the link's speed rather than a staged pageable copy);
  per-body contact forces decode each pooled contact with MuJoCo Warp's ``contact_force_fn`` and
  add it to its world's bodies.

On a CUDA device the step and the sync are each captured once as a CUDA graph, so a command is
one copy in (the packed inputs, from page-locked memory), one graph launch (its first kernel
unpacks them) and one copy out. MuJoCo Warp computes in float32 only.
"""
import ctypes
import time

import numpy as np
import warp as wp

# Before anything initialises Warp or loads a module: its banner and one line per kernel module
# would otherwise fill the worker's stderr, whose last lines are what a failure reports.
wp.config.quiet = True
wp.config.log_level = wp.LOG_WARNING
import mujoco_warp as mjw  # noqa: E402
from mujoco_warp._src.support import contact_force_fn
from mujoco_warp._src.types import vec5

from worker_common import (CODE_BAD_FF, CODE_BAD_GO, CODE_BAD_PUSH, CODE_BAD_TARGET, DR_FIELDS, FF0,
                           INP_WIDTH, MAXVAL, NB, NJ, NQ, NV, OUTPUT_OFFSETS, OUTPUTS_PER_ENV,
                           InitError, copied_outputs, log)

_NJ = wp.constant(NJ)
_FF0 = wp.constant(FF0)
_NB = wp.constant(NB)
_MAXVAL = wp.constant(float(MAXVAL))
_BAD_PUSH, _BAD_GO = wp.constant(CODE_BAD_PUSH), wp.constant(CODE_BAD_GO)
_BAD_TARGET, _BAD_FF = wp.constant(CODE_BAD_TARGET), wp.constant(CODE_BAD_FF)

# Element offsets of each output block in the packed array, per env (multiply by N).
_BLOCK = OUTPUT_OFFSETS
_O_QVEL, _O_TORQUE = wp.constant(_BLOCK["qvel"]), wp.constant(_BLOCK["torque"])
_O_XPOS, _O_XQUAT = wp.constant(_BLOCK["body_pos"]), wp.constant(_BLOCK["body_quat"])
_O_LIN, _O_ANG = wp.constant(_BLOCK["body_lin_vel"]), wp.constant(_BLOCK["body_ang_vel"])
_O_CF = wp.constant(_BLOCK["contact_force"])

# Contacts and constraint rows allocated per world. A standing G1 has 8 foot contacts (32 rows
# with pyramidal condim 3); a fallen one touches the floor with more geoms. Rows beyond njmax
# would be dropped by MuJoCo Warp (an overflow warning), so both are generous.
NCONMAX = 64
NJMAX = 4 * NCONMAX + 2 * NJ


@wp.func
def _bad(x: float):
    return (not wp.isfinite(x)) or wp.abs(x) > _MAXVAL


@wp.kernel
def _unpack_kernel(step: int, inp: wp.array2d(dtype=float), target: wp.array2d(dtype=float),
                   ff: wp.array2d(dtype=float), go: wp.array(dtype=int),
                   qpos: wp.array2d(dtype=float), qvel: wp.array2d(dtype=float),
                   code: wp.array(dtype=int), nsub: wp.array(dtype=int),
                   fail_nsub: wp.array(dtype=int)):
    """The command's packed inputs (worker_common's columns: targets, push, go, feed-forward)
    into the arrays the kernels read (`go` cleared for a sync, whose targets are not used),
    then the push: qvel[0:3] += dv (world), qvel[3:6] += R(q)^T dw (the root's angular
    velocity is local). A world whose inputs are not finite (worker_common.input_codes: its
    push; on a step its go flag, or the targets or feed-forward torques it would advance with)
    fails with that code, its state untouched: the check costs the host nothing."""
    w = wp.tid()
    c = int(0)
    for k in range(6):
        if not wp.isfinite(inp[w, _NJ + k]):
            c = _BAD_PUSH
    if step != 0 and c == 0:
        flag = inp[w, _NJ + 6]
        if not wp.isfinite(flag):
            c = _BAD_GO
        elif flag > 0.5:
            for j in range(_NJ):
                if not wp.isfinite(inp[w, j]):
                    c = _BAD_TARGET
            if c == 0:
                for j in range(_NJ):
                    if not wp.isfinite(inp[w, _FF0 + j]):
                        c = _BAD_FF
    if c != 0:
        if code[w] == 0:
            code[w] = c
            fail_nsub[w] = nsub[w]
        go[w] = 0
        return
    qvel[w, 0] += inp[w, _NJ + 0]
    qvel[w, 1] += inp[w, _NJ + 1]
    qvel[w, 2] += inp[w, _NJ + 2]
    qw = qpos[w, 3]
    u = wp.vec3(-qpos[w, 4], -qpos[w, 5], -qpos[w, 6])  # conjugate: rotate by R^T
    dw = wp.vec3(inp[w, _NJ + 3], inp[w, _NJ + 4], inp[w, _NJ + 5])
    t = 2.0 * wp.cross(u, dw)
    local = dw + qw * t + wp.cross(u, t)
    qvel[w, 3] += local[0]
    qvel[w, 4] += local[1]
    qvel[w, 5] += local[2]
    if step == 0 or not (inp[w, _NJ + 6] > 0.5):
        # An env that does not advance keeps its last targets: its row is not read (and may
        # hold anything), and every world is stepped, the ones not kept then put back.
        go[w] = 0
        return
    for j in range(_NJ):
        target[w, j] = inp[w, j]
        ff[w, j] = inp[w, _FF0 + j]
    go[w] = 1


@wp.func
def _put_back(w: int, saved_qpos: wp.array2d(dtype=float), saved_qvel: wp.array2d(dtype=float),
              saved_warm: wp.array2d(dtype=float), saved_time: wp.array(dtype=float),
              qpos: wp.array2d(dtype=float), qvel: wp.array2d(dtype=float),
              warm: wp.array2d(dtype=float), sim_time: wp.array(dtype=float)):
    """World w's saved state (qpos, qvel, the solver's warm start, time) back in place."""
    for i in range(qpos.shape[1]):
        qpos[w, i] = saved_qpos[w, i]
    for i in range(qvel.shape[1]):
        qvel[w, i] = saved_qvel[w, i]
        warm[w, i] = saved_warm[w, i]
    sim_time[w] = saved_time[w]


@wp.kernel
def _pd_save_kernel(qpos: wp.array2d(dtype=float), qvel: wp.array2d(dtype=float),
                    warm: wp.array2d(dtype=float), sim_time: wp.array(dtype=float),
                    target: wp.array2d(dtype=float), ff: wp.array2d(dtype=float),
                    kp: wp.array2d(dtype=float), kd: wp.array2d(dtype=float),
                    effort: wp.array(dtype=float), ctrl: wp.array2d(dtype=float),
                    saved_qpos: wp.array2d(dtype=float), saved_qvel: wp.array2d(dtype=float),
                    saved_warm: wp.array2d(dtype=float), saved_time: wp.array(dtype=float)):
    """Before a substep, per world and qpos coordinate i: the state saved (the check after the
    substep puts it back in worlds it does not keep) and, for joint j = i - 7, the PD torque
    tau = clip(kp (target - q) - kd qdot + ff, -effort, effort). One launch instead of the PD
    kernel and four copies: inside a CUDA graph each node costs microseconds of its own."""
    w, i = wp.tid()
    saved_qpos[w, i] = qpos[w, i]
    if i < qvel.shape[1]:
        saved_qvel[w, i] = qvel[w, i]
        saved_warm[w, i] = warm[w, i]
    if i == 0:
        saved_time[w] = sim_time[w]
    if i >= 7:
        j = i - 7
        tau = kp[w, j] * (target[w, j] - qpos[w, i]) - kd[w, j] * qvel[w, i - 1] + ff[w, j]
        ctrl[w, j] = wp.clamp(tau, -effort[j], effort[j])


@wp.kernel
def _check_kernel(substep: int, go: wp.array(dtype=int), qpos: wp.array2d(dtype=float),
                  qvel: wp.array2d(dtype=float), qacc: wp.array2d(dtype=float),
                  warm: wp.array2d(dtype=float), sim_time: wp.array(dtype=float),
                  ctrl: wp.array2d(dtype=float), code: wp.array(dtype=int),
                  nsub: wp.array(dtype=int), fail_nsub: wp.array(dtype=int),
                  torque: wp.array2d(dtype=float), solver_niter: wp.array(dtype=int),
                  tally: wp.array2d(dtype=wp.float64), substep_max: wp.array(dtype=int),
                  nacon: wp.array(dtype=int), counts: wp.array(dtype=wp.float64),
                  saved_qpos: wp.array2d(dtype=float), saved_qvel: wp.array2d(dtype=float),
                  saved_warm: wp.array2d(dtype=float), saved_time: wp.array(dtype=float)):
    """After one substep: keep it (count it, record its torques) for running worlds with a good
    state; fail running worlds with a bad one (code 1 qpos, 2 qvel, 3 qacc); every world not
    kept gets its saved state back. Each world's tally (stepped substeps, solver iterations)
    counts every substep the physics computed, kept or not; `substep_max[substep]` gets the most
    iterations any world needed in this substep (summed into `counts` by `_count_kernel` once a
    control step), and world 0 adds the substep's contacts, all worlds' (MuJoCo Warp pools them)."""
    w = wp.tid()
    tally[w, 0] += wp.float64(1.0)
    tally[w, 1] += wp.float64(solver_niter[w])
    wp.atomic_max(substep_max, substep, solver_niter[w])
    if w == 0:
        counts[0] += wp.float64(nacon[0])
        counts[2] += wp.float64(1.0)
    c = int(0)
    for i in range(qpos.shape[1]):
        if _bad(qpos[w, i]):
            c = 1
    if c == 0:
        for i in range(qvel.shape[1]):
            if _bad(qvel[w, i]):
                c = 2
    if c == 0:
        for i in range(qacc.shape[1]):
            if _bad(qacc[w, i]):
                c = 3
    run = go[w] != 0 and code[w] == 0
    if run and c == 0:
        nsub[w] = nsub[w] + 1
        for j in range(_NJ):
            torque[w, j] = ctrl[w, j]
        return
    if run:
        code[w] = c
        fail_nsub[w] = nsub[w] + 1
    _put_back(w, saved_qpos, saved_qvel, saved_warm, saved_time, qpos, qvel, warm, sim_time)


@wp.kernel
def _count_kernel(substep_max: wp.array(dtype=int), counts: wp.array(dtype=wp.float64)):
    """Once a control step: each substep's most solver iterations of any world, summed. The
    batched solver iterates until its slowest world is done, so that maximum, not the mean,
    sets a substep's solver cost."""
    for s in range(substep_max.shape[0]):
        counts[1] += wp.float64(substep_max[s])
        substep_max[s] = 0


@wp.kernel
def _restore_kernel(restore: wp.array(dtype=int), saved_qpos: wp.array2d(dtype=float),
                    saved_qvel: wp.array2d(dtype=float), saved_warm: wp.array2d(dtype=float),
                    saved_time: wp.array(dtype=float), qpos: wp.array2d(dtype=float),
                    qvel: wp.array2d(dtype=float), warm: wp.array2d(dtype=float),
                    sim_time: wp.array(dtype=float)):
    w = wp.tid()
    if restore[w] != 0:
        _put_back(w, saved_qpos, saved_qvel, saved_warm, saved_time, qpos, qvel, warm, sim_time)


@wp.kernel
def _clear_kernel(mask: wp.array(dtype=int), code: wp.array(dtype=int), nsub: wp.array(dtype=int),
                  fail_nsub: wp.array(dtype=int), torque: wp.array2d(dtype=float)):
    w = wp.tid()
    if mask[w] == 0:
        return
    code[w] = 0
    nsub[w] = 0
    fail_nsub[w] = 0
    for j in range(_NJ):
        torque[w, j] = 0.0


@wp.kernel
def _contact_force_kernel(opt_cone: int, geom_bodyid: wp.array(dtype=int),
                          frame: wp.array(dtype=wp.mat33), friction: wp.array(dtype=vec5),
                          dim: wp.array(dtype=int), efc_address: wp.array2d(dtype=int),
                          adhesion: wp.array(dtype=float), geom: wp.array(dtype=wp.vec2i),
                          worldid: wp.array(dtype=int), efc_force: wp.array2d(dtype=float),
                          njmax: int, nacon: wp.array(dtype=int),
                          body_force: wp.array2d(dtype=wp.vec3)):
    """Adds each active contact's world-frame force to its second geom's body and subtracts it
    from its first's (the frame's normal points from geom 0 to geom 1)."""
    c = wp.tid()
    if c >= nacon[0]:
        return
    w = worldid[c]
    f = contact_force_fn(opt_cone, frame, friction, dim, efc_address, adhesion, efc_force, njmax,
                         nacon, w, c, True)
    force = wp.spatial_top(f)
    g = geom[c]
    wp.atomic_add(body_force, w, geom_bodyid[g[1]], force)
    wp.atomic_sub(body_force, w, geom_bodyid[g[0]], force)


@wp.kernel
def _pack_env_kernel(n: int, qpos: wp.array2d(dtype=float), qvel: wp.array2d(dtype=float),
                     torque: wp.array2d(dtype=float), out: wp.array(dtype=float),
                     code: wp.array(dtype=int), nsub: wp.array(dtype=int),
                     fail_nsub: wp.array(dtype=int), ints: wp.array2d(dtype=int)):
    """Each world's qpos, qvel and last kept substep's torques into the packed outputs, and its
    failure code and substep counts into the ints the host reads."""
    w = wp.tid()
    ints[0, w] = code[w]
    ints[1, w] = nsub[w]
    ints[2, w] = fail_nsub[w]
    for i in range(qpos.shape[1]):
        out[w * qpos.shape[1] + i] = qpos[w, i]
    for i in range(qvel.shape[1]):
        out[_O_QVEL * n + w * qvel.shape[1] + i] = qvel[w, i]
    for j in range(_NJ):
        out[_O_TORQUE * n + w * _NJ + j] = torque[w, j]


@wp.kernel
def _pack_body_kernel(n: int, body_rootid: wp.array(dtype=int), xpos: wp.array2d(dtype=wp.vec3),
                      xquat: wp.array2d(dtype=wp.quat), xipos: wp.array2d(dtype=wp.vec3),
                      subtree_com: wp.array2d(dtype=wp.vec3),
                      cvel: wp.array2d(dtype=wp.spatial_vector),
                      body_force: wp.array2d(dtype=wp.vec3), out: wp.array(dtype=float)):
    """Bodies 1..30: xpos, xquat, the velocity at the body's CoM in the world frame
    (mj_objectVelocity: cvel moved from the subtree CoM of the body's root), contact force."""
    w, k = wp.tid()
    b = k + 1
    e = w * _NB + k
    ang = wp.spatial_top(cvel[w, b])
    lin = wp.spatial_bottom(cvel[w, b]) + wp.cross(ang, xipos[w, b] - subtree_com[w, body_rootid[b]])
    p = xpos[w, b]
    q = xquat[w, b]
    f = body_force[w, b]
    for i in range(3):
        out[_O_XPOS * n + e * 3 + i] = p[i]
        out[_O_LIN * n + e * 3 + i] = lin[i]
        out[_O_ANG * n + e * 3 + i] = ang[i]
        out[_O_CF * n + e * 3 + i] = f[i]
    for i in range(4):
        out[_O_XQUAT * n + e * 4 + i] = q[i]


_PAGE = 4096


def _page_lock(ptr, nbytes):
    """Page-locks [ptr, ptr + nbytes) for every CUDA context (cuMemHostRegister, PORTABLE), so
    device-to-host copies into it are direct DMA. Returns (the registered start address or None,
    an error message or None)."""
    start = ptr & ~(_PAGE - 1)
    end = (ptr + nbytes + _PAGE - 1) & ~(_PAGE - 1)
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return None, f"libcuda.so.1: {e}"
    register = cuda.cuMemHostRegister_v2
    register.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    register.restype = ctypes.c_int
    code = register(ctypes.c_void_p(start), ctypes.c_size_t(end - start), ctypes.c_uint(1))
    return (start, None) if code == 0 else (None, f"cuMemHostRegister returned CUresult {code}")


def _page_unlock(start):
    """Undoes `_page_lock` for the range registered at `start` (cuMemHostUnregister)."""
    cuda = ctypes.CDLL("libcuda.so.1")
    unregister = cuda.cuMemHostUnregister
    unregister.argtypes = [ctypes.c_void_p]
    unregister.restype = ctypes.c_int
    code = unregister(ctypes.c_void_p(start))
    if code != 0:
        log(f"cuMemHostUnregister returned CUresult {code}")


def preload(device):
    """Initialises Warp and `device` ("auto", "cpu" or "gpu": the CUDA driver and context) ahead
    of the init line (`gpu_worker.preload`); the physics' own device query then finds them.
    Returns the device and the libraries' versions (`gpu_worker.check`)."""
    return _device({"device": device}), f"mujoco-warp {mjw.__version__}, warp {wp.__version__}"


def _device(cfg):
    """Warp device for the init's `device`: auto = the first CUDA device when there is one."""
    cuda = wp.get_cuda_device_count() > 0
    if cfg["device"] == "gpu" and not cuda:
        raise InitError("no CUDA device for Warp (device gpu); use device cpu or auto")
    return wp.get_device("cuda:0" if cuda and cfg["device"] != "cpu" else "cpu")


class WarpPhysics:
    """N worlds of one MuJoCo Warp ``Data`` and the launches that advance them."""

    backend = "mujoco_warp"

    def __init__(self, cfg, model, dr_host, kp_host, kd_host):
        if cfg["x64"]:
            raise InitError("MuJoCo Warp computes in float32 only; x64 needs impl jax")
        self.cfg, self.model = cfg, model
        n = self.n = cfg["num_envs"]
        # Where the start-up goes (seconds), in the worker's ready reply: first Warp's own
        # initialisation (the CUDA driver and context, the kernel cache), which the device
        # query starts.
        t0 = time.perf_counter()
        self.device = _device(cfg)
        self.startup = {"device_s": time.perf_counter() - t0}
        self.library = f"mujoco-warp {mjw.__version__}, warp {wp.__version__}"
        t0 = time.perf_counter()
        with wp.ScopedDevice(self.device):
            try:
                self.m = mjw.put_model(model, batch_sizes={k: n for k in DR_FIELDS})
                self.d = mjw.make_data(model, nworld=n, nconmax=NCONMAX, njmax=NJMAX)
            except (NotImplementedError, ValueError) as e:
                raise InitError(f"MuJoCo Warp cannot run this model: {e}") from None
            f32 = wp.float32
            self.targets = wp.zeros((n, NJ), dtype=f32)
            self.ff = wp.zeros((n, NJ), dtype=f32)
            self.go = wp.zeros(n, dtype=int)
            self.kp = wp.zeros((n, NJ), dtype=f32)
            self.kd = wp.zeros((n, NJ), dtype=f32)
            self.effort = wp.array(cfg["effort"].astype(np.float32), dtype=f32)
            self.torque = wp.zeros((n, NJ), dtype=f32)
            self.code = wp.zeros(n, dtype=int)
            self.nsub = wp.zeros(n, dtype=int)
            self.fail_nsub = wp.zeros(n, dtype=int)
            self.restore = wp.zeros(n, dtype=int)
            # What the physics had to do (`counters`, in the worker's stats): per world the
            # substeps computed and the solver's iterations in them, and all worlds' contacts.
            self.tally = wp.zeros((n, 2), dtype=wp.float64)
            self.counts = wp.zeros(3, dtype=wp.float64)  # contacts, per-substep maxima, substeps
            self.substep_max = wp.zeros(cfg["decimation"], dtype=int)
            self.mask = wp.zeros(n, dtype=int)
            self.saved = {k: wp.zeros_like(getattr(self.d, k))
                          for k in ("qpos", "qvel", "qacc_warmstart", "time")}
            self.reset_qpos = wp.zeros((n, NQ), dtype=f32)
            self.reset_qvel = wp.zeros((n, NV), dtype=f32)
            self.body_force = wp.zeros((n, NB + 1), dtype=wp.vec3)
            self.out = wp.zeros(n * OUTPUTS_PER_ENV, dtype=wp.float32)
            # The values each command copies to the host (no contact forces unless asked for).
            self.copied = copied_outputs(n, cfg["contact_forces"])
            # A command's inputs cross in one copy, straight from the supervisor's float32 block
            # in the shared file (page-locked whole on a CUDA device, `share`: the copy is
            # asynchronous and the host copies nothing; inputs anywhere else go through a
            # page-locked buffer), unpacked on the device by the first kernel of the step and
            # sync graphs.
            self.inp_dev = wp.zeros((n, INP_WIDTH), dtype=f32)
            self.inp_staging = None
            self.ints = wp.zeros((3, n), dtype=int)
        # The host arrays the device copies from and into ("inputs", "outputs"), each wrapped
        # once per address: (its key, the Warp array the copy uses, whether the inputs are
        # staged). `shared`: the (start, end) address of the shared file when it is page-locked
        # whole; `locked`: where each registered range starts ("shared", or "outputs" locked on
        # their own).
        self.host_views, self.shared, self.locked = {}, None, {}
        # Where `advance` spends its time (seconds summed over the commands, the worker's
        # `stats`): the inputs' copy to the device issued, the launches, the
        # outputs' copy and the wait for it (the launched work included); on a CUDA device also
        # the device's own time for the copy in, the launched work and the copy out (CUDA
        # events).
        self.timings = {"to_device_s": 0.0, "launch_s": 0.0, "copy_out_wait_s": 0.0}
        self.events = None
        if self.device.is_cuda:
            self.events = [wp.Event(self.device, enable_timing=True) for _ in range(4)]
            self.timings.update({"device_copy_in_s": 0.0, "device_launched_s": 0.0,
                                 "device_copy_out_s": 0.0})
        wp.synchronize_device(self.device)
        self.startup["model_and_data_s"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        self.set_params(dr_host, kp_host, kd_host)
        qpos0 = np.repeat(model.qpos0[None], n, axis=0)
        self.reset(np.ones(n, bool), qpos0, np.zeros((n, NV)))
        wp.synchronize_device(self.device)
        self.startup["params_and_reset_s"] = time.perf_counter() - t1
        # The first launches load (compile) every kernel; graphs can only be captured after.
        t1 = time.perf_counter()
        self.step_graph = self.sync_graph = None
        self._launch(step=True)
        self._launch(step=False)
        wp.synchronize_device(self.device)
        self.startup["first_launches_s"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        if self.device.is_cuda:
            with wp.ScopedDevice(self.device):
                with wp.ScopedCapture() as capture:
                    self._launch(step=True)
                self.step_graph = capture.graph
                with wp.ScopedCapture() as capture:
                    self._launch(step=False)
                self.sync_graph = capture.graph
        self.startup["graph_capture_s"] = time.perf_counter() - t1
        log(f"MuJoCo Warp on {self.device}: kernels loaded in {time.perf_counter() - t0:.1f} s"
            f"{', step and sync captured as CUDA graphs' if self.device.is_cuda else ''}")

    def set_params(self, dr_host, kp_host, kd_host, envs=None):
        """Copies the per-env model fields and gains to the device. Only the rows of `envs`
        (all when None) changed: they are converted into float32 copies kept on the host, which
        then go to the device whole (a reset of a few envs converts a few rows, not 4096)."""
        if envs is None:
            self.host_params = {k: dr_host[k].astype(np.float32) for k in DR_FIELDS}
            self.host_params["kp"], self.host_params["kd"] = (kp_host.astype(np.float32),
                                                              kd_host.astype(np.float32))
        else:
            for k in DR_FIELDS:
                self.host_params[k][envs] = dr_host[k][envs]
            self.host_params["kp"][envs] = kp_host[envs]
            self.host_params["kd"][envs] = kd_host[envs]
        for k in DR_FIELDS:
            field = getattr(self.m, k)
            field.assign(wp.array(self.host_params[k], dtype=field.dtype, device=self.device))
        self.kp.assign(self.host_params["kp"])
        self.kd.assign(self.host_params["kd"])

    def reset(self, mask, qpos, qvel):
        """mj_resetData, then qpos/qvel, for the masked worlds; mj_forward for all (the others'
        state is left as it is); clears the masked worlds' failure, counters and torques."""
        with wp.ScopedDevice(self.device):
            mask_wp = wp.array(mask.astype(np.int32), dtype=int)
            mjw.reset_data(self.m, self.d, reset=mask_wp)
            self.mask.assign(mask.astype(np.int32))
            self.restore.assign((~mask).astype(np.int32))
            # Unmasked worlds: save their state so the generic copy below keeps it.
            for k, v in self.saved.items():
                wp.copy(v, getattr(self.d, k))
            self.reset_qpos.assign(qpos.astype(np.float32))
            self.reset_qvel.assign(qvel.astype(np.float32))
            wp.copy(self.d.qpos, self.reset_qpos)
            wp.copy(self.d.qvel, self.reset_qvel)
            wp.launch(_restore_kernel, dim=self.n, inputs=[
                self.restore, self.saved["qpos"], self.saved["qvel"], self.saved["qacc_warmstart"],
                self.saved["time"], self.d.qpos, self.d.qvel, self.d.qacc_warmstart, self.d.time])
            mjw.forward(self.m, self.d)
            wp.launch(_clear_kernel, dim=self.n,
                      inputs=[self.mask, self.code, self.nsub, self.fail_nsub, self.torque])

    def _control_step(self):
        d, n = self.d, self.n
        saved = (self.saved["qpos"], self.saved["qvel"], self.saved["qacc_warmstart"],
                 self.saved["time"])
        for s in range(self.cfg["decimation"]):
            wp.launch(_pd_save_kernel, dim=(n, NQ), inputs=[
                d.qpos, d.qvel, d.qacc_warmstart, d.time, self.targets, self.ff, self.kp,
                self.kd, self.effort, d.ctrl, *saved])
            mjw.step(self.m, d)
            wp.launch(_check_kernel, dim=n, inputs=[
                s, self.go, d.qpos, d.qvel, d.qacc, d.qacc_warmstart, d.time, d.ctrl, self.code,
                self.nsub, self.fail_nsub, self.torque, d.solver_niter, self.tally,
                self.substep_max, d.nacon, self.counts, *saved])
        wp.launch(_count_kernel, dim=1, inputs=[self.substep_max, self.counts])

    def counters(self):
        """What the physics did since start-up, summed (the worker's `stats`): substeps computed
        over all worlds, the solver's iterations in them, contacts (each substep's, all
        worlds'), substeps, and each substep's most iterations of any world. Their ratios say
        how hard the states were: the solver's work, and so a substep's cost, grows with the
        iterations and contacts (a standing robot needs fewer than a moving one), and the
        batched solver runs until its slowest world is done."""
        with wp.ScopedDevice(self.device):
            tally = self.tally.numpy().sum(axis=0)
            contacts, most, substeps = (float(v) for v in self.counts.numpy())
        return {"world_substeps": float(tally[0]), "solver_iterations": float(tally[1]),
                "contacts": contacts, "substeps": substeps, "solver_iterations_max": most}

    def _observe(self):
        m, d, n = self.m, self.d, self.n
        mjw.kinematics(m, d)
        mjw.com_pos(m, d)
        mjw.com_vel(m, d)
        self.body_force.zero_()
        if self.cfg["contact_forces"]:
            wp.launch(_contact_force_kernel, dim=d.naconmax, inputs=[
                m.opt.cone, m.geom_bodyid, d.contact.frame, d.contact.friction, d.contact.dim,
                d.contact.efc_address, d.contact.adhesion, d.contact.geom, d.contact.worldid,
                d.efc.force, d.njmax, d.nacon, self.body_force])
        wp.launch(_pack_env_kernel, dim=n, inputs=[
            n, d.qpos, d.qvel, self.torque, self.out, self.code, self.nsub, self.fail_nsub, self.ints])
        wp.launch(_pack_body_kernel, dim=(n, NB), inputs=[
            n, m.body_rootid, d.xpos, d.xquat, d.xipos, d.subtree_com, d.cvel, self.body_force,
            self.out])

    def _launch(self, step):
        with wp.ScopedDevice(self.device):
            graph = self.step_graph if step else self.sync_graph
            if graph is not None:
                wp.capture_launch(graph)
                return
            wp.launch(_unpack_kernel, dim=self.n, inputs=[
                int(step), self.inp_dev, self.targets, self.ff, self.go, self.d.qpos, self.d.qvel,
                self.code, self.nsub, self.fail_nsub])
            if step:
                self._control_step()
            self._observe()

    def share(self, mem):
        """The worker's shared file, whole (a numpy memmap): page-locked as one range on a CUDA
        device, so that the device copies each command's inputs from it and its outputs into it
        by DMA, the inputs asynchronously, with no host copy. One range, not one per block: at
        a few envs the outputs' and the inputs' pages overlap, so the second registration would
        fail, and a copy from a range partly locked is refused. If it cannot be locked, the
        outputs are locked on their own and the inputs go through a page-locked buffer."""
        if not self.device.is_cuda:
            return
        self.close()
        with wp.ScopedDevice(self.device):
            start, why = _page_lock(mem.ctypes.data, mem.nbytes)
        if why is None:
            self.locked["shared"] = start
            self.shared = (mem.ctypes.data, mem.ctypes.data + mem.nbytes)
            log(f"shared memory: {mem.nbytes / 1e6:.1f} MB page-locked for direct copies")
        else:
            log(f"shared memory not page-locked ({why}): outputs locked on their own, inputs staged")

    def _host_view(self, arr, kind):
        """The Warp CPU array the device copies `arr` (float32, contiguous: the outputs'
        destination or the inputs' source) into or from, and whether the inputs must be staged
        first; wrapped once per address. Inside the page-locked shared file (or on the CPU
        device) `arr` itself; otherwise outputs are locked on their own (pageable where that
        fails: slower, the same values) and inputs go through a page-locked buffer."""
        key = (arr.ctypes.data, arr.size)
        view = self.host_views.get(kind)
        if view is not None and view[0] == key:
            return view[1], view[2]
        size = self.out.size if kind == "outputs" else self.inp_dev.size
        if arr.size != size or not arr.flags.c_contiguous or arr.dtype != np.float32:
            raise ValueError(f"{kind} must be {size} contiguous float32 values")
        start, end = arr.ctypes.data, arr.ctypes.data + arr.nbytes
        direct = not self.device.is_cuda or (self.shared is not None
                                             and self.shared[0] <= start and end <= self.shared[1])
        if not direct and kind == "outputs":
            self._unlock("outputs")
            with wp.ScopedDevice(self.device):
                locked, why = _page_lock(start, arr.nbytes)
            if why is None:
                self.locked["outputs"] = locked
                log(f"outputs: {arr.nbytes / 1e6:.1f} MB page-locked for direct copies")
            else:
                log(f"outputs: not page-locked ({why}); copies go through pageable memory")
            direct = True
        if direct:
            wrapped = wp.array(ptr=start, dtype=wp.float32, shape=arr.shape, device="cpu")
        else:
            if self.inp_staging is None:
                self.inp_staging = wp.zeros(self.inp_dev.shape, dtype=wp.float32, device="cpu",
                                            pinned=True)
            wrapped = self.inp_staging
        self.host_views[kind] = (key, wrapped, not direct)
        return wrapped, not direct

    def _unlock(self, kind=None):
        """Unregisters the page-locked range of `kind` ("shared", "outputs"; every one: None),
        if any, before its memory goes away."""
        for k in [kind] if kind else list(self.locked):
            start = self.locked.pop(k, None)
            if start is None:
                continue
            if k == "shared":
                self.shared = None
            # In the device's context, as the range was registered: the driver call needs one
            # current, and outside a scope Warp may leave none.
            with wp.ScopedDevice(self.device):
                wp.synchronize_device(self.device)
                _page_unlock(start)

    def close(self):
        """Leaves nothing registered with the driver for memory this instance does not own:
        called before the shared file it wrote into is unmapped (a spare's warm-up)."""
        self._unlock()
        self.host_views = {}

    def advance(self, inp, step, dest):
        """Pushes, then (for `step`) one control step; writes the packed outputs into `dest`
        (float32, shared memory) and returns the ints [N, 3] (code, nsub, fail_nsub)."""
        t0 = time.perf_counter()
        host_out, _ = self._host_view(dest, "outputs")
        # Shared memory holds the inputs in float32 already: the device copies them from there
        # (until the answer, which waits for the device, nobody writes them), or, where the
        # inputs lie elsewhere, from a page-locked copy.
        host_in, staged = self._host_view(inp, "inputs")
        if staged:
            np.copyto(self.inp_staging.numpy(), inp, casting="no")
        e = self.events
        with wp.ScopedDevice(self.device):
            if e:
                wp.record_event(e[0])
            wp.copy(self.inp_dev, host_in)
            t1 = time.perf_counter()
            if e:
                wp.record_event(e[1])
            self._launch(step)
            if e:
                wp.record_event(e[2])
            t2 = time.perf_counter()
            wp.copy(host_out, self.out, count=self.copied)
            if e:
                wp.record_event(e[3])
            ints = self.ints.numpy().T  # synchronises the device: every copy has landed
        t = self.timings
        t["to_device_s"] += t1 - t0
        t["launch_s"] += t2 - t1
        t["copy_out_wait_s"] += time.perf_counter() - t2
        if e:
            # The device has passed the last event (the synchronising copy above).
            elapsed = [wp.get_event_elapsed_time(a, b, synchronize=False) / 1000.0 for a, b in zip(e, e[1:])]
            t["device_copy_in_s"] += elapsed[0]
            t["device_launched_s"] += elapsed[1]
            t["device_copy_out_s"] += elapsed[2]
        return ints
