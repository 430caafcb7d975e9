-- The physics engine that ran each episode's committed run, as the simulator describes itself
-- (backend, device, engine version: "cpu (MuJoCo 3.17.0)"), for the dataset card and the
-- episode listing. NULL: committed before this column, or never run.
-- PostgreSQL dialect (keep in step with ../sqlite/).
ALTER TABLE episodes ADD COLUMN engine TEXT;
