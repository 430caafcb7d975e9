-- Hosted submissions (issue 40): the uploaded ONNX policy the server runs itself, stored
-- content-addressed in the object store (policies/<sha256>.onnx), with the file's name and the
-- overrides given at upload (JSON, as PolicyOverrides). One row per hosted submission.
-- PostgreSQL dialect (keep in step with ../sqlite/).
CREATE TABLE hosted_policies (
    submission_id  TEXT PRIMARY KEY REFERENCES submissions (id),
    sha256         TEXT NOT NULL,
    file_name      TEXT NOT NULL,
    bytes          BIGINT NOT NULL,
    overrides      TEXT NOT NULL,
    created_at     BIGINT NOT NULL
);
