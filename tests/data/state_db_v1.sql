-- The state database as skyd's first schema made it (PRAGMA user_version = 1).
CREATE TABLE requests (
    id TEXT PRIMARY KEY,
    verb TEXT NOT NULL,
    status TEXT NOT NULL,             -- PENDING|RUNNING|SUCCEEDED|FAILED|CANCELLED
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    payload TEXT,                     -- JSON
    result TEXT,                      -- JSON
    error TEXT,                       -- JSON (SkydError.to_dict())
    stages TEXT,                      -- JSON list
    pid INTEGER,                      -- daemon pid that ran it
    cluster_name TEXT
);
CREATE INDEX requests_status ON requests(status);
CREATE INDEX requests_created ON requests(created_at);

CREATE TABLE clusters (
    name TEXT PRIMARY KEY,
    status TEXT NOT NULL,             -- INIT|UP|STOPPED
    cloud TEXT, region TEXT, zone TEXT, instance_type TEXT,
    accelerators TEXT,                -- JSON {NAME: COUNT}
    num_nodes INTEGER, use_spot INTEGER, hourly_cost REAL,
    launched_at REAL, status_updated_at REAL,
    autostop_minutes INTEGER, autostop_down INTEGER,
    handle TEXT,                      -- JSON
    resources TEXT,                   -- JSON
    last_use TEXT, request_id TEXT, status_reason TEXT
);

CREATE TABLE cluster_history (
    id INTEGER PRIMARY KEY,
    name TEXT, cloud TEXT, region TEXT, zone TEXT, instance_type TEXT,
    accelerators TEXT, num_nodes INTEGER, use_spot INTEGER, hourly_cost REAL,
    launched_at REAL, ended_at REAL, duration_s REAL, cost REAL
);
CREATE INDEX cluster_history_name ON cluster_history(name);

CREATE TABLE cluster_jobs (
    cluster TEXT NOT NULL, job_id INTEGER NOT NULL,
    name TEXT, status TEXT, submitted_at REAL, started_at REAL, ended_at REAL,
    exit_code INTEGER, resources TEXT, username TEXT, log_path TEXT,
    PRIMARY KEY (cluster, job_id)
);

CREATE TABLE managed_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT, status TEXT, schedule_state TEXT, priority INTEGER,
    submitted_at REAL, started_at REAL, ended_at REAL,
    recoveries INTEGER DEFAULT 0, restarts INTEGER DEFAULT 0, failure_reason TEXT,
    dag TEXT, strategy TEXT, current_task INTEGER DEFAULT 0,
    cluster TEXT, cluster_job_id INTEGER, last_region TEXT, updated_at REAL
);
CREATE INDEX managed_jobs_status ON managed_jobs(status);

CREATE TABLE managed_job_attempts (
    job_id INTEGER NOT NULL, task_index INTEGER NOT NULL, attempt INTEGER NOT NULL,
    cluster TEXT, cluster_job_id INTEGER, cloud TEXT, region TEXT, zone TEXT,
    status TEXT, started_at REAL, ended_at REAL, exit_code INTEGER, reason TEXT,
    PRIMARY KEY (job_id, task_index, attempt)
);

CREATE TABLE services (
    name TEXT PRIMARY KEY, status TEXT, spec TEXT, created_at REAL,
    endpoint TEXT, lb_port INTEGER, version INTEGER
);

CREATE TABLE replicas (
    service TEXT NOT NULL, replica_id INTEGER NOT NULL,
    status TEXT, cluster TEXT, url TEXT, version INTEGER,
    created_at REAL, updated_at REAL,
    PRIMARY KEY (service, replica_id)
);

CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT);
