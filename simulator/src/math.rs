//! Small rotation helpers. Quaternions are `[w, x, y, z]` (MuJoCo's order) unless a name says
//! otherwise.

pub type Quat = [f64; 4];
pub type Vec3 = [f64; 3];

pub const IDENTITY: Quat = [1.0, 0.0, 0.0, 0.0];

pub fn quat_mul(a: &Quat, b: &Quat) -> Quat {
    [
        a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3],
        a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2],
        a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1],
        a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0],
    ]
}

pub fn quat_conj(q: &Quat) -> Quat {
    [q[0], -q[1], -q[2], -q[3]]
}

pub fn quat_normalize(q: &Quat) -> Quat {
    let n = (q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]).sqrt();
    [q[0] / n, q[1] / n, q[2] / n, q[3] / n]
}

fn cross(a: &Vec3, b: &Vec3) -> Vec3 {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

/// Rotates `v` by unit quaternion `q` (R(q)·v).
pub fn rotate(q: &Quat, v: &Vec3) -> Vec3 {
    let u = [q[1], q[2], q[3]];
    let t = cross(&u, v);
    let t = [2.0 * t[0], 2.0 * t[1], 2.0 * t[2]];
    let c = cross(&u, &t);
    [
        v[0] + q[0] * t[0] + c[0],
        v[1] + q[0] * t[1] + c[1],
        v[2] + q[0] * t[2] + c[2],
    ]
}

/// Rotates `v` by the inverse of `q` (R(q)ᵀ·v): world → body frame.
pub fn rotate_inv(q: &Quat, v: &Vec3) -> Vec3 {
    rotate(&quat_conj(q), v)
}

/// Quaternion of a rotation by `angle` about the world z axis.
pub fn quat_from_yaw(angle: f64) -> Quat {
    let h = 0.5 * angle;
    [h.cos(), 0.0, 0.0, h.sin()]
}

/// Heading: yaw of the body x axis in the world, atan2(y, x) of R(q)·(1,0,0).
pub fn heading(q: &Quat) -> f64 {
    let x = rotate(q, &[1.0, 0.0, 0.0]);
    x[1].atan2(x[0])
}

/// R(q)·(1,0,0), the first column of q's rotation matrix.
pub fn x_axis(q: &Quat) -> Vec3 {
    let [w, x, y, z] = *q;
    [
        1.0 - 2.0 * (y * y + z * z),
        2.0 * (x * y + w * z),
        2.0 * (x * z - w * y),
    ]
}

/// R(q)·(0,0,1), the third column of q's rotation matrix.
pub fn z_axis(q: &Quat) -> Vec3 {
    let [w, x, y, z] = *q;
    [
        2.0 * (x * z + w * y),
        2.0 * (y * z - w * x),
        1.0 - 2.0 * (x * x + y * y),
    ]
}

/// (cos, sin) of [`heading`], from the body x axis's horizontal part without trigonometry;
/// (1, 0) where that axis is vertical (where `heading` is atan2(0, 0) = 0).
pub fn heading_cos_sin(q: &Quat) -> (f64, f64) {
    let x = x_axis(q);
    let r = x[0].hypot(x[1]);
    if r > 0.0 { (x[0] / r, x[1] / r) } else { (1.0, 0.0) }
}

/// `[R(q)·(1,0,0), R(q)·(0,0,1)]`: the 6-number tangent-normal encoding of a rotation.
pub fn tan_norm(q: &Quat) -> [f64; 6] {
    let t = rotate(q, &[1.0, 0.0, 0.0]);
    let n = rotate(q, &[0.0, 0.0, 1.0]);
    [t[0], t[1], t[2], n[0], n[1], n[2]]
}

/// Rotation vector (axis·angle) of a unit quaternion, angle in [0, π].
pub fn quat_to_rotvec(q: &Quat) -> Vec3 {
    let q = if q[0] < 0.0 { [-q[0], -q[1], -q[2], -q[3]] } else { *q };
    let s = (q[1] * q[1] + q[2] * q[2] + q[3] * q[3]).sqrt();
    if s < 1e-12 {
        // Small-angle limit: angle ≈ 2·s, axis·angle ≈ 2·(x, y, z).
        return [2.0 * q[1], 2.0 * q[2], 2.0 * q[3]];
    }
    let angle = 2.0 * s.atan2(q[0]);
    [q[1] / s * angle, q[2] / s * angle, q[3] / s * angle]
}

/// Rotation about a unit axis by `angle`.
pub fn quat_from_axis_angle(axis: &Vec3, angle: f64) -> Quat {
    let h = 0.5 * angle;
    let s = h.sin();
    [h.cos(), axis[0] * s, axis[1] * s, axis[2] * s]
}

/// Spherical interpolation from `a` to `b` (BFM_ZERO_FACTS §3.3): flips `b` for the short path
/// and falls back to the normalised average when the half-angle's sine is below 1e-3.
pub fn slerp(a: &Quat, b: &Quat, t: f64) -> Quat {
    let mut dot = a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3];
    let b = if dot < 0.0 {
        dot = -dot;
        [-b[0], -b[1], -b[2], -b[3]]
    } else {
        *b
    };
    let dot = dot.min(1.0);
    let half = dot.acos();
    let sin_half = (1.0 - dot * dot).sqrt();
    let (wa, wb) = if sin_half < 1e-3 {
        (1.0 - t, t)
    } else {
        (((1.0 - t) * half).sin() / sin_half, (t * half).sin() / sin_half)
    };
    quat_normalize(&[
        wa * a[0] + wb * b[0],
        wa * a[1] + wb * b[1],
        wa * a[2] + wb * b[2],
        wa * a[3] + wb * b[3],
    ])
}

/// The rotation matrix of a unit quaternion (wxyz), `m[row][column]`.
pub fn quat_to_matrix(q: &Quat) -> [[f64; 3]; 3] {
    let [w, x, y, z] = *q;
    [
        [
            1.0 - 2.0 * (y * y + z * z),
            2.0 * (x * y - w * z),
            2.0 * (x * z + w * y),
        ],
        [
            2.0 * (x * y + w * z),
            1.0 - 2.0 * (x * x + z * z),
            2.0 * (y * z - w * x),
        ],
        [
            2.0 * (x * z - w * y),
            2.0 * (y * z + w * x),
            1.0 - 2.0 * (x * x + y * y),
        ],
    ]
}

pub fn add(a: &Vec3, b: &Vec3) -> Vec3 {
    [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
}

pub fn sub(a: &Vec3, b: &Vec3) -> Vec3 {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}

pub fn cross3(a: &Vec3, b: &Vec3) -> Vec3 {
    cross(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
        a.iter().zip(b).all(|(x, y)| (x - y).abs() < tol)
    }

    #[test]
    fn rotation_basics() {
        let q = quat_from_yaw(std::f64::consts::FRAC_PI_2);
        assert!(close(&rotate(&q, &[1.0, 0.0, 0.0]), &[0.0, 1.0, 0.0], 1e-12));
        assert!(close(&rotate_inv(&q, &[0.0, 1.0, 0.0]), &[1.0, 0.0, 0.0], 1e-12));
        assert!((heading(&q) - std::f64::consts::FRAC_PI_2).abs() < 1e-12);
        let r = quat_from_axis_angle(&[0.0, 0.6, 0.8], 0.7);
        assert!(close(&quat_to_rotvec(&r), &[0.0, 0.42, 0.56], 1e-12));
        let rq = quat_mul(&r, &quat_conj(&r));
        assert!(close(&rq, &IDENTITY, 1e-12));
    }

    #[test]
    fn slerp_halfway_and_short_path() {
        let a = IDENTITY;
        let b = quat_from_yaw(1.0);
        let m = slerp(&a, &b, 0.5);
        assert!(close(&m, &quat_from_yaw(0.5), 1e-12));
        let neg_b = [-b[0], -b[1], -b[2], -b[3]];
        assert!(close(&slerp(&a, &neg_b, 0.5), &quat_from_yaw(0.5), 1e-12));
        assert!(close(&slerp(&a, &b, 0.0), &a, 1e-12));
        assert!(close(&slerp(&a, &b, 1.0), &b, 1e-12));
    }
}
