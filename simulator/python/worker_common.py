"""Constants and helpers shared by the GPU worker (gpu_worker.py) and its physics
implementations (mjx_physics.py, warp_physics.py)."""
import math
import sys

NQ, NV, NJ, NB = 36, 35, 29, 30
# Columns of the per-command input block the worker hands its physics ([N, INP_WIDTH]): PD
# targets [0, NJ), push dv dw [NJ, NJ + 6), go (1 = advance) at NJ + 6, feed-forward torques
# [FF0, FF0 + NJ).
FF0 = NJ + 7
INP_WIDTH = FF0 + NJ
# Failure codes (the `failed` output, 0 = ok): 1, 2, 3 a bad qpos, qvel or qacc after a substep
# (the substep is discarded); 4 to 7 a command input that is not finite, found by the physics
# before it uses it, per env (the env fails and its state is left as it was): 4 its push (any
# command, idle envs included: a push is added to every env, zero where there is none), and
# on `step` 5 its go flag, 6 a PD target or 7 a feed-forward torque of an env told to advance
# (an idle env's row is not read).
CODE_BAD_PUSH, CODE_BAD_GO, CODE_BAD_TARGET, CODE_BAD_FF = 4, 5, 6, 7
# mjMAXVAL: MuJoCo's threshold for bad qpos / qvel / qacc (mj_checkPos, mj_checkVel, mj_checkAcc).
MAXVAL = 1e10
# Per-env model fields: what domain randomisation changes (body_mass, body_ipos, geom_friction)
# and what MuJoCo's mj_setConst derives from them.
DR_FIELDS = ("body_mass", "body_ipos", "geom_friction", "body_subtreemass", "body_invweight0",
             "dof_invweight0")
# Outputs a physics implementation returns as one flat block (float32, or float64 with x64),
# in this order (each array whole, [N, ...] in C order), contiguous in shared memory, with
# their per-env shapes.
DEVICE_OUTPUTS = (("qpos", (NQ,)), ("qvel", (NV,)), ("torque", (NJ,)), ("body_pos", (NB, 3)),
                  ("body_quat", (NB, 4)), ("body_lin_vel", (NB, 3)), ("body_ang_vel", (NB, 3)),
                  ("contact_force", (NB, 3)))


def _output_offsets():
    offsets, offset = {}, 0
    for name, shape in DEVICE_OUTPUTS:
        offsets[name] = offset
        offset += math.prod(shape)
    return offsets, offset


# Where each output starts in the packed block, per env (multiply by N), and its length per env.
OUTPUT_OFFSETS, OUTPUTS_PER_ENV = _output_offsets()
assert DEVICE_OUTPUTS[-1][0] == "contact_force", "contact forces end the block (see copied_outputs)"


def copied_outputs(num_envs, contact_forces):
    """How many values of the packed block a command copies to the host: all of them, or, where
    contact forces are off (the evaluations' setting), all but the contact forces, which end the
    block and stay the zeros the shared file was created with. A sixth less to copy."""
    return num_envs * (OUTPUTS_PER_ENV - (0 if contact_forces else NB * 3))


def input_codes(inp, step, xp=None):
    """Each env's input failure code (above; 0 = usable) for a command's input block `inp`
    [N, INP_WIDTH]: the reference for MuJoCo Warp's check in its kernel, and the check itself
    for the stub (numpy, `xp` None) and MJX (`xp` jax.numpy, traced into its step). With numpy,
    one pass over the whole block first: a finite sum means finite values, the usual answer."""
    import numpy as np

    if xp is None:
        xp = np
        if np.isfinite(inp.sum()):
            return np.zeros(inp.shape[0], np.int32)
    ok = xp.isfinite(inp)
    codes = xp.zeros(inp.shape[0], xp.int32)
    if step:
        active = inp[:, NJ + 6] > 0.5
        codes = xp.where(active & ~ok[:, FF0:].all(axis=1), CODE_BAD_FF, codes)
        codes = xp.where(active & ~ok[:, :NJ].all(axis=1), CODE_BAD_TARGET, codes)
        codes = xp.where(~ok[:, NJ + 6], CODE_BAD_GO, codes)
    return xp.where(~ok[:, NJ:NJ + 6].all(axis=1), CODE_BAD_PUSH, codes)


class InitError(Exception):
    """A bad init message or environment; reported as {"error": ...}."""


class CommandError(Exception):
    """A command that cannot be applied; reported as `error <message>`."""


def log(msg):
    print(f"[gpu_worker] {msg}", file=sys.stderr, flush=True)
