-- Hosted submissions (issue 40): the uploaded ONNX policy the server runs itself, stored
-- content-addressed in the object store (policies/<sha256>.onnx), with the file's name and the
-- overrides given at upload (JSON, as PolicyOverrides). One row per hosted submission.
-- SQLite dialect (keep in step with ../postgres/).
CREATE TABLE hosted_policies (
    submission_id  TEXT PRIMARY KEY REFERENCES submissions (id),
    sha256         TEXT NOT NULL,
    file_name      TEXT NOT NULL,
    bytes          INTEGER NOT NULL,
    overrides      TEXT NOT NULL,
    created_at     INTEGER NOT NULL
);
