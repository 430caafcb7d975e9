-- Joint-position benchmarks: the PD gains a submission runs with, fixed by its first session
-- (JSON: {"kp": [29], "kd": [29], "preset": name or null}); a resume must declare the same
-- gains or none, and audits re-run its episodes with them (issue 31). NULL otherwise.
-- SQLite dialect (keep in step with ../postgres/).
ALTER TABLE submissions ADD COLUMN joint_gains TEXT;
