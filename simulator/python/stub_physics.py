"""The GPU worker with its physics stubbed out (``impl = "stub"``): a benchmark mode, never a
simulator.

It exists to measure what the worker's host side and the Rust side cost per control step
(``arena sim bench --backend gpu --gpu-impl stub``), on any machine, with no JAX or Warp: the
same protocol, shared memory, validation and output writes as the real implementations, and
outputs of exactly their layout (one packed float32 block in ``DEVICE_OUTPUTS`` order plus the
int block [N, 3]), but the "physics" is the cheapest stand-in that keeps a tracking episode
alive:

- a reset writes the env's qpos / qvel; a step sets the active envs' joint positions to their
  targets (a perfect kinematic tracker) and counts ``decimation`` substeps; pushes add to qvel;
  an env whose inputs are not finite fails with the real implementations' codes
  (``worker_common.input_codes``, which they compute on the device);
- body poses and velocities are those of the model's ``qpos0`` at rest (``mj_forward`` once
  at start-up), the same for every env; torques and contact forces are zero.

So the per-step cost left is the host path itself: reading the inputs, one host copy of the
packed block (where the real implementations copy it from the device) and writing shared
memory.
"""
import time

import numpy as np

from worker_common import (DEVICE_OUTPUTS, NB, NJ, NQ, NV, OUTPUT_OFFSETS, OUTPUTS_PER_ENV, InitError,
                           copied_outputs, input_codes, log)



class StubPhysics:
    """N envs whose joints follow their targets exactly; no dynamics."""

    backend = "stub"

    def __init__(self, cfg, model, dr_host, kp_host, kd_host):
        import mujoco

        if cfg["x64"]:
            raise InitError("impl stub has no precision to choose (x64 is for impl jax)")
        self.cfg, self.model = cfg, model
        n = self.n = cfg["num_envs"]
        self.device = "host"
        self.library = f"stub (no physics), numpy {np.__version__}"
        # The packed block the real implementations copy from the device each command.
        self.out = np.zeros(n * OUTPUTS_PER_ENV, np.float32)
        self.blocks = {}
        for name, shape in DEVICE_OUTPUTS:
            start = OUTPUT_OFFSETS[name] * n
            self.blocks[name] = self.out[start:start + n * int(np.prod(shape))].reshape((n,) + shape)
        data = mujoco.MjData(model)
        mujoco.mj_forward(model, data)
        mujoco.mj_comVel(model, data)
        lin_ang = np.zeros((NB, 6))
        for b in range(1, NB + 1):
            mujoco.mj_objectVelocity(model, data, mujoco.mjtObj.mjOBJ_XBODY, b, lin_ang[b - 1], 0)
        rest = {
            "body_pos": data.xpos[1:], "body_quat": data.xquat[1:],
            "body_ang_vel": lin_ang[:, :3], "body_lin_vel": lin_ang[:, 3:],
        }
        for name, value in rest.items():
            self.blocks[name][:] = value[None]
        self.blocks["qpos"][:] = model.qpos0[None]
        # The values each command copies (the contact forces, zero here, only when asked for).
        self.copied = copied_outputs(n, cfg["contact_forces"])
        self.code = np.zeros(n, np.int64)
        self.nsub = np.zeros(n, np.int64)
        self.fail_nsub = np.zeros(n, np.int64)
        self.ints = np.zeros((n, 3), np.int64)
        # Seconds summed over the commands (the worker's `stats`): the stand-in for the
        # device-to-host copy of the packed block.
        self.timings = {"copy_out_s": 0.0}
        log(f"stub physics for {n} envs: no dynamics (a benchmark of the host side)")

    def set_params(self, dr_host, kp_host, kd_host, envs=None):
        """Nothing to copy: the stub has no model fields."""

    def reset(self, mask, qpos, qvel):
        self.blocks["qpos"][mask] = qpos[mask]
        self.blocks["qvel"][mask] = qvel[mask]
        self.blocks["torque"][mask] = 0.0
        self.code[mask] = 0
        self.nsub[mask] = 0
        self.fail_nsub[mask] = 0

    def advance(self, inp, step, dest):
        """Pushes, then (for `step`) the joints of active envs jump to their targets; writes the
        packed outputs into `dest` and returns the ints [N, 3], like the real implementations."""
        qvel = self.blocks["qvel"]
        codes = input_codes(inp, step)
        usable = codes == 0
        if not usable.all():
            failing = ~usable & (self.code == 0)
            self.code[failing] = codes[failing]
            self.fail_nsub[failing] = self.nsub[failing]
            qvel[usable, :6] += inp[usable, NJ:NJ + 6]
        else:
            qvel[:, :6] += inp[:, NJ:NJ + 6]
        if step:
            go = (inp[:, NJ + 6] > 0.5) & (self.code == 0)
            # In place, without gathering the active rows (the stub's own cost is not the host
            # side's).
            np.copyto(self.blocks["qpos"][:, 7:], inp[:, :NJ], casting="same_kind", where=go[:, None])
            self.nsub += self.cfg["decimation"] * go
        self.ints[:, 0] = self.code
        self.ints[:, 1] = self.nsub
        self.ints[:, 2] = self.fail_nsub
        # One copy of the block, where the real implementations copy it from the device.
        t0 = time.perf_counter()
        np.copyto(dest[:self.copied], self.out[:self.copied])
        self.timings["copy_out_s"] += time.perf_counter() - t0
        return self.ints


assert NQ == 36 and NV == 35
