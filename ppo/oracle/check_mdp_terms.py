#!/usr/bin/env python3
"""Recomputes the tracking MDP's terms (docs/ppo-tracker.md §2-5) with numpy from states the
simulator recorded, and compares them with what arena-ppo computed (ppo/tests/mdp_terms.rs).

Written from the definitions, with its own quaternion helpers (wxyz): the actor's 160 inputs,
the critic's 286, the nine reward terms and the three failure terminations.
"""

import json
import math
import sys

import numpy as np


def qmul(a, b):
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array(
        [
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ]
    )


def qconj(q):
    return np.array([q[0], -q[1], -q[2], -q[3]])


def qmat(q):
    w, x, y, z = q / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def angle(q1, q2):
    """‖axis-angle(q1 q2*)‖: the rotation angle between the two, in [0, π]."""
    r = qmat(q1) @ qmat(q2).T
    return math.acos(max(-1.0, min(1.0, (np.trace(r) - 1.0) / 2.0)))


def yaw_only(q):
    r = qmat(q)
    psi = math.atan2(r[1, 0], r[0, 0])
    return np.array([math.cos(psi / 2), 0.0, 0.0, math.sin(psi / 2)])


def two_cols(m):
    return m[:, :2].reshape(-1)


def main(path):
    data = json.load(open(path))
    anchor, tracked, ee = data["anchor"], data["tracked_bodies"], data["end_effectors"]
    rw, tc, dt = data["rewards"], data["terminations"], data["dt"]
    default = np.array(data["default_pose"])
    soft = np.array(data["soft_limits"])
    worst = {"actor": 0.0, "critic": 0.0, "rewards": 0.0}
    term_mismatch = 0
    fired = [0, 0, 0]
    for k, rec in enumerate(data["records"]):
        o, oref = rec["observed"], rec["observed_reference"]
        bp = np.array(o["body_pos"]).reshape(-1, 3)
        br = np.array(o["body_rot"]).reshape(-1, 4)
        qpos, qvel = np.array(o["qpos"]), np.array(o["qvel"])
        rbp, rbr = np.array(oref["body_pos"]), np.array(oref["body_rot"])
        ra_r = qmat(br[anchor])
        pelvis_r = qmat(qpos[3:7])
        actor = np.concatenate(
            [
                np.array(oref["qpos"])[7:],
                np.array(oref["command_joint_vel"]),
                ra_r.T @ (rbp[anchor] - bp[anchor]),
                two_cols(ra_r.T @ qmat(rbr[anchor])),
                pelvis_r.T @ qvel[:3],
                qvel[3:6],
                qpos[7:] - default,
                qvel[6:],
                np.array(rec["last_action"]),
            ]
        )
        critic = np.concatenate(
            [actor[:67]]
            + [ra_r.T @ (bp[b] - bp[anchor]) for b in tracked]
            + [two_cols(ra_r.T @ qmat(br[b])) for b in tracked]
            + [actor[67:]]
        )
        worst["actor"] = max(worst["actor"], np.abs(actor - np.array(rec["actor"])).max())
        worst["critic"] = max(worst["critic"], np.abs(critic - np.array(rec["critic"])).max())

        a = rec["after"]
        p = np.array(a["body_pos"]).reshape(-1, 3)
        r = np.array(a["body_rot"]).reshape(-1, 4)
        v = np.array(a["body_vel"]).reshape(-1, 3)
        w = np.array(a["body_ang_vel"]).reshape(-1, 3)
        f = np.array(a["contact_force"]).reshape(-1, 3)
        q = np.array(a["qpos"])[7:]
        rv, rwv = np.array(oref["body_vel"]), np.array(oref["body_ang_vel"])
        # Targets aligned to the robot anchor when the action was chosen: its x, y and yaw.
        yaw = yaw_only(qmul(br[anchor], qconj(rbr[anchor])))
        shift = np.array([bp[anchor][0], bp[anchor][1], rbp[anchor][2]])
        target_p = [shift + qmat(yaw) @ (rbp[b] - rbp[anchor]) for b in tracked]
        target_q = [qmul(yaw, rbr[b]) for b in tracked]
        kernel = lambda e, s: math.exp(-e / (s * s))  # noqa: E731
        values = [
            kernel(np.sum((rbp[anchor] - p[anchor]) ** 2), rw["anchor_pos_std"]),
            kernel(angle(rbr[anchor], r[anchor]) ** 2, rw["anchor_ori_std"]),
            kernel(np.mean([np.sum((target_p[i] - p[b]) ** 2) for i, b in enumerate(tracked)]), rw["body_pos_std"]),
            kernel(np.mean([angle(target_q[i], r[b]) ** 2 for i, b in enumerate(tracked)]), rw["body_ori_std"]),
            kernel(np.mean([np.sum((rv[b] - v[b]) ** 2) for b in tracked]), rw["body_lin_vel_std"]),
            kernel(np.mean([np.sum((rwv[b] - w[b]) ** 2) for b in tracked]), rw["body_ang_vel_std"]),
            float(np.sum((np.array(rec["action"]) - np.array(rec["last_action"])) ** 2)),
            float(np.sum(np.maximum(soft[:, 0] - q, 0) + np.maximum(q - soft[:, 1], 0))),
            float(sum(1 for b in range(30) if b not in ee and np.linalg.norm(f[b]) > 1.0)),
        ]
        weights = [
            rw[k]
            for k in (
                "anchor_pos",
                "anchor_ori",
                "body_pos",
                "body_ori",
                "body_lin_vel",
                "body_ang_vel",
                "action_rate",
                "joint_limit",
                "undesired_contacts",
            )
        ]
        total = sum(x * y for x, y in zip(values, weights)) * dt
        for mine, theirs in zip(values + [total], rec["rewards"] + [rec["reward_total"]]):
            worst["rewards"] = max(worst["rewards"], abs(mine - theirs) / max(1.0, abs(theirs)))
        gz = lambda quat: -qmat(quat)[2, 2]  # noqa: E731
        terms = [
            abs(rbp[anchor][2] - p[anchor][2]) > tc["anchor_height"],
            abs(gz(rbr[anchor]) - gz(r[anchor])) > tc["anchor_ori"],
            any(abs(rbp[b][2] - p[b][2]) > tc["end_effector_height"] for b in ee),
        ]
        fired = [x + int(t) for x, t in zip(fired, terms)]
        if terms != rec["terminations"]:
            term_mismatch += 1
            print(f"step {k}: terminations {rec['terminations']}, expected {terms}")
    print(
        f"{len(data['records'])} steps: largest difference actor {worst['actor']:.2e}, critic {worst['critic']:.2e}, "
        f"rewards (relative) {worst['rewards']:.2e}; terminations fired {fired}, {term_mismatch} mismatches"
    )
    ok = worst["actor"] < 1e-4 and worst["critic"] < 1e-4 and worst["rewards"] < 1e-6 and term_mismatch == 0
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main(sys.argv[1])
