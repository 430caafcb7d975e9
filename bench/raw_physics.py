"""The physics libraries alone, as bench/gpu_throughput.py and bench/warp_step_profile.py run
them beside the arena: MJX's jit(vmap(...)) and MuJoCo Warp's world-batched step with a PD
kernel, on robots standing at rest (the libraries' own benchmark workload) or, for MuJoCo Warp,
on the arena's own workload (`arena sim bench --dump`: the same start states and PD commands as
its envs). No host copies, no observations: what the library can do.
"""
import json
import os
import subprocess
import sys
import time

# Control steps after the timed ones whose physics workload is read out (one read a substep).
WORKLOAD_STEPS = 10


def raw_mjx(xml_path, envs, steps):
    """Control steps/s of jit(vmap(4 PD substeps of mjx.step)) from a standing start."""
    import jax
    import jax.numpy as jnp
    import mujoco
    import numpy as np
    from mujoco import mjx

    model = mujoco.MjModel.from_xml_path(xml_path)
    mx = mjx.put_model(model, impl="jax")
    data = mjx.make_data(mx, impl="jax")
    qpos0 = np.array(model.qpos0)
    qpos0[2] = 0.8
    data = data.replace(qpos=jnp.asarray(qpos0, dtype=data.qpos.dtype))
    batch = jax.tree_util.tree_map(lambda x: jnp.repeat(x[None], envs, axis=0), data)
    kp = jnp.full(model.nu, 100.0, dtype=data.qpos.dtype)
    kd = jnp.full(model.nu, 2.0, dtype=data.qpos.dtype)
    effort = jnp.asarray(model.jnt_actfrcrange[1:, 1], dtype=data.qpos.dtype)
    target = jnp.asarray(qpos0[7:], dtype=data.qpos.dtype)

    def control_step(d):
        def substep(d, _):
            tau = jnp.clip(kp * (target - d.qpos[7:]) - kd * d.qvel[6:], -effort, effort)
            return mjx.step(mx, d.replace(ctrl=tau)), None

        return jax.lax.scan(substep, d, None, length=4)[0]

    step = jax.jit(jax.vmap(control_step), donate_argnums=0)
    # Compile: the first output's leaves may be typed differently from the input (weak types),
    # which compiles once more, so two warm-up calls.
    for _ in range(2):
        batch = step(batch)
    jax.block_until_ready(batch)
    start = time.perf_counter()
    for _ in range(steps):
        batch = step(batch)
    jax.block_until_ready(batch)
    return envs * steps / (time.perf_counter() - start)


def raw_pd_kernel(wp):
    """Raw MuJoCo Warp's PD law (gains 100 / 2 towards the target, clipped to the effort
    limits) as a Warp kernel over (world, joint); also bench/warp_step_profile.py's."""
    @wp.kernel
    def pd(qpos: wp.array2d(dtype=float), qvel: wp.array2d(dtype=float),
           target: wp.array(dtype=float), effort: wp.array(dtype=float),
           ctrl: wp.array2d(dtype=float)):
        w, j = wp.tid()
        tau = 100.0 * (target[j] - qpos[w, 7 + j]) - 2.0 * qvel[w, 6 + j]
        ctrl[w, j] = wp.clamp(tau, -effort[j], effort[j])

    return pd


def timed_control_steps(wp, cuda, control_step, envs, steps):
    """Control steps/s of `steps` calls of `control_step` (its kernels already loaded) over
    `envs` worlds: on a GPU captured once as a CUDA graph and launched, on the CPU called."""
    graph = None
    if cuda:
        with wp.ScopedCapture() as capture:
            control_step()
        graph = capture.graph
    wp.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        if graph is not None:
            wp.capture_launch(graph)
        else:
            control_step()
    wp.synchronize()
    return envs * steps / (time.perf_counter() - start)


def raw_warp(xml_path, envs, steps, device):
    """Control steps/s of MuJoCo Warp: 4 x (PD kernel, mujoco_warp.step) over `envs` worlds from a
    standing start, captured once as a CUDA graph on a GPU."""
    import mujoco
    import mujoco_warp as mjw
    import numpy as np
    import warp as wp

    wp.config.quiet = True
    pd = raw_pd_kernel(wp)
    model = mujoco.MjModel.from_xml_path(xml_path)
    data = mujoco.MjData(model)
    data.qpos[2] = 0.8
    mujoco.mj_forward(model, data)
    cuda = wp.get_cuda_device_count() > 0 and device != "cpu"
    with wp.ScopedDevice("cuda:0" if cuda else "cpu"):
        m = mjw.put_model(model)
        d = mjw.put_data(model, data, nworld=envs, nconmax=64, njmax=4 * 64 + 58)
        target = wp.array(np.asarray(model.qpos0[7:], np.float32), dtype=float)
        effort = wp.array(np.asarray(model.jnt_actfrcrange[1:, 1], np.float32), dtype=float)

        def control_step():
            for _ in range(4):
                wp.launch(pd, dim=(envs, model.nu), inputs=[d.qpos, d.qvel, target, effort, d.ctrl])
                mjw.step(m, d)

        control_step()  # loads (compiles) every kernel
        rate = timed_control_steps(wp, cuda, control_step, envs, steps)
        # What the physics had to do in those states, as the arena's worker counts it (its
        # `stats`): the solver's iterations per world and substep, and contacts per world.
        iterations = most = contacts = 0.0
        for _ in range(WORKLOAD_STEPS):
            for _ in range(4):
                wp.launch(pd, dim=(envs, model.nu), inputs=[d.qpos, d.qvel, target, effort, d.ctrl])
                mjw.step(m, d)
                niter = d.solver_niter.numpy()
                iterations += float(niter.mean())
                most += float(niter.max())
                contacts += float(d.nacon.numpy()[0]) / envs
        substeps = 4 * WORKLOAD_STEPS
        return rate, {"solver_iterations": iterations / substeps, "solver_iterations_max": most / substeps,
                      "contacts": contacts / substeps}


def tracking_dump(arena, envs, steps, folder):
    """`arena sim bench --dump --dump-only` on the CPU backend (every core): the model, the envs'
    initial states and the PD commands the replay policy gave them over `steps` control steps,
    the same episodes `sim bench` runs on any backend (the built-in motions, env e on motion e
    modulo their number, the default rules)."""
    cmd = [arena, "sim", "bench", "--envs", str(envs), "--steps", str(steps), "--backend", "cpu",
           "--dump", folder, "--dump-only"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr}")


def raw_warp_tracking(folder, envs, steps, device):
    """Control steps/s of MuJoCo Warp on the arena's own workload: `envs` worlds start where
    `sim bench` started its envs and follow the PD commands its replay policy gave them
    (`tracking_dump`): 4 x (a PD kernel reading that step's targets, gains and feed-forward
    torques, mujoco_warp.step), captured once as a CUDA graph on a GPU, no host work at all.
    Also the physics workload over the whole run, read after each substep of a second pass."""
    import mujoco
    import mujoco_warp as mjw
    import numpy as np
    import warp as wp

    wp.config.quiet = True
    meta = json.load(open(os.path.join(folder, "meta.json")))
    n_dump, dump_steps, nu = meta["envs"], meta["steps"], meta["nu"]
    if envs > n_dump or steps > dump_steps:
        sys.exit(f"the dump holds {n_dump} envs x {dump_steps} steps, not {envs} x {steps}")
    model = mujoco.MjModel.from_xml_path(os.path.join(folder, "model.xml"))
    q0 = np.fromfile(os.path.join(folder, "initial_qpos.f64")).reshape(n_dump, model.nq)[:envs]
    v0 = np.fromfile(os.path.join(folder, "initial_qvel.f64")).reshape(n_dump, model.nv)[:envs]
    c = np.fromfile(os.path.join(folder, "commands.f64")).reshape(n_dump, 2 + 2 * dump_steps, nu)[:envs]
    f32 = np.float32
    targets = np.ascontiguousarray(c[:, 2::2][:, :steps].transpose(1, 0, 2), f32)  # steps x envs x nu
    ff = np.ascontiguousarray(c[:, 3::2][:, :steps].transpose(1, 0, 2), f32)

    @wp.kernel
    def pd(k: wp.array(dtype=int), target: wp.array3d(dtype=float), ff: wp.array3d(dtype=float),
           kp: wp.array2d(dtype=float), kd: wp.array2d(dtype=float), effort: wp.array(dtype=float),
           qpos: wp.array2d(dtype=float), qvel: wp.array2d(dtype=float), ctrl: wp.array2d(dtype=float)):
        w, j = wp.tid()
        s = k[0]
        tau = kp[w, j] * (target[s, w, j] - qpos[w, 7 + j]) - kd[w, j] * qvel[w, 6 + j] + ff[s, w, j]
        ctrl[w, j] = wp.clamp(tau, -effort[j], effort[j])

    @wp.kernel
    def next_step(k: wp.array(dtype=int)):
        k[0] = k[0] + 1

    cuda = wp.get_cuda_device_count() > 0 and device != "cpu"
    with wp.ScopedDevice("cuda:0" if cuda else "cpu"):
        m = mjw.put_model(model)
        d = mjw.put_data(model, mujoco.MjData(model), nworld=envs, nconmax=64, njmax=4 * 64 + 2 * nu)
        k = wp.zeros(1, dtype=int)
        arrays = [wp.array(targets, dtype=float), wp.array(ff, dtype=float),
                  wp.array(c[:, 0].astype(f32), dtype=float), wp.array(c[:, 1].astype(f32), dtype=float),
                  wp.array(np.asarray(meta["effort"], f32), dtype=float)]

        def start():
            mjw.reset_data(m, d)
            d.qpos.assign(q0.astype(f32))
            d.qvel.assign(v0.astype(f32))
            k.zero_()

        def control_step(readout=None):
            for _ in range(4):
                wp.launch(pd, dim=(envs, nu), inputs=[k, *arrays, d.qpos, d.qvel, d.ctrl])
                mjw.step(m, d)
                if readout is not None:
                    readout()
            wp.launch(next_step, dim=1, inputs=[k])

        start()
        control_step()  # loads (compiles) every kernel
        start()
        rate = timed_control_steps(wp, cuda, control_step, envs, steps)
        sums = {"solver_iterations": 0.0, "solver_iterations_max": 0.0, "contacts": 0.0}

        def readout():
            niter = d.solver_niter.numpy()
            sums["solver_iterations"] += float(niter.mean())
            sums["solver_iterations_max"] += float(niter.max())
            sums["contacts"] += float(d.nacon.numpy()[0]) / envs

        start()
        for _ in range(steps):
            control_step(readout)
        # Worlds still upright at the end (root above 0.5 m), for the reader: sim bench's replay
        # policy is open loop, and by 200 steps most robots have fallen, in the arena as here
        # (the workload counters, equal to the arena's on Warp's CPU device, say so).
        upright = float((d.qpos.numpy()[:, 2] > 0.5).mean())
    return rate, {key: v / (4 * steps) for key, v in sums.items()} | {"upright": upright}
