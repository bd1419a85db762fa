-- The service database's schema at main f38ff7b (before Alembic), as genEval's create_all made it on sqlite:
-- written once by compiling main's tables (CreateTable/CreateIndex); tests/service/server/migrations/test_service_migrations.py upgrades it.
CREATE TABLE benchmarks (
	name VARCHAR(100) NOT NULL,
	version VARCHAR(64) NOT NULL,
	title VARCHAR(300) NOT NULL,
	config JSON NOT NULL,
	registered_at FLOAT NOT NULL,
	round_base INTEGER,
	reuse JSON,
	PRIMARY KEY (name, version)
);
CREATE TABLE jobs (
	id VARCHAR(32) NOT NULL,
	benchmark VARCHAR(100) NOT NULL,
	benchmark_version VARCHAR(64) NOT NULL,
	name VARCHAR(100) NOT NULL,
	owner_id VARCHAR(32) NOT NULL,
	owner_name VARCHAR(200) NOT NULL,
	model JSON NOT NULL,
	config JSON NOT NULL,
	overrides JSON NOT NULL,
	seeds JSON NOT NULL,
	run_dir VARCHAR(300) NOT NULL,
	upload_path VARCHAR(300),
	status VARCHAR(16) NOT NULL,
	created_at FLOAT NOT NULL,
	started_at FLOAT,
	finished_at FLOAT,
	worker_id VARCHAR(100),
	lease_expires_at FLOAT,
	heartbeat_at FLOAT,
	attempts INTEGER NOT NULL,
	images_done INTEGER NOT NULL,
	images_total INTEGER,
	eta_s FLOAT,
	error TEXT,
	result JSON,
	error_detail TEXT,
	round INTEGER DEFAULT 0 NOT NULL,
	parent_id VARCHAR(32),
	PRIMARY KEY (id)
);
CREATE INDEX ix_jobs_benchmark ON jobs (benchmark);
CREATE INDEX ix_jobs_created_at ON jobs (created_at);
CREATE INDEX ix_jobs_owner_id ON jobs (owner_id);
CREATE INDEX ix_jobs_parent_id ON jobs (parent_id);
CREATE INDEX ix_jobs_status ON jobs (status);
CREATE UNIQUE INDEX uq_jobs_active_name_round ON jobs (benchmark, benchmark_version, name, round) WHERE status IN ('queued', 'running', 'done');
CREATE TABLE standings (
	job_id VARCHAR(32) NOT NULL,
	benchmark VARCHAR(100) NOT NULL,
	version VARCHAR(64) NOT NULL,
	name VARCHAR(100) NOT NULL,
	finished_at FLOAT,
	run_dirs JSON NOT NULL,
	repetitions INTEGER NOT NULL,
	scores JSON,
	better_than JSON NOT NULL,
	warnings JSON NOT NULL,
	interval_note TEXT NOT NULL,
	computed_at FLOAT NOT NULL,
	marks JSON NOT NULL,
	settled JSON,
	PRIMARY KEY (job_id)
);
CREATE INDEX ix_standings_benchmark ON standings (benchmark);
CREATE INDEX ix_standings_version ON standings (version);
CREATE TABLE tokens (
	id VARCHAR(32) NOT NULL,
	name VARCHAR(200) NOT NULL,
	role VARCHAR(16) NOT NULL,
	token_sha256 VARCHAR(64) NOT NULL,
	created_at FLOAT NOT NULL,
	revoked_at FLOAT,
	PRIMARY KEY (id)
);
CREATE UNIQUE INDEX ix_tokens_token_sha256 ON tokens (token_sha256);
CREATE TABLE upload_attempts (
	id INTEGER NOT NULL,
	owner_id VARCHAR(32) NOT NULL,
	at FLOAT NOT NULL,
	PRIMARY KEY (id)
);
CREATE INDEX ix_upload_attempts_at ON upload_attempts (at);
CREATE INDEX ix_upload_attempts_owner_id ON upload_attempts (owner_id);
CREATE TABLE uploads (
	id VARCHAR(32) NOT NULL,
	owner_id VARCHAR(32) NOT NULL,
	kind VARCHAR(16) NOT NULL,
	sha256 VARCHAR(64) NOT NULL,
	size INTEGER NOT NULL,
	filename VARCHAR(200) NOT NULL,
	path VARCHAR(300) NOT NULL,
	created_at FLOAT NOT NULL,
	PRIMARY KEY (id)
);
CREATE INDEX ix_uploads_owner_id ON uploads (owner_id);
CREATE TABLE verdicts (
	first VARCHAR(32) NOT NULL,
	second VARCHAR(32) NOT NULL,
	benchmark VARCHAR(100) NOT NULL,
	version VARCHAR(64) NOT NULL,
	upper VARCHAR(32) NOT NULL,
	rounds INTEGER NOT NULL,
	verdict JSON NOT NULL,
	computed_at FLOAT NOT NULL,
	PRIMARY KEY (first, second)
);
CREATE INDEX ix_verdicts_version ON verdicts (version);
CREATE TABLE workers (
	id VARCHAR(100) NOT NULL,
	host VARCHAR(200) NOT NULL,
	pid INTEGER NOT NULL,
	device VARCHAR(50) NOT NULL,
	started_at FLOAT NOT NULL,
	last_seen FLOAT NOT NULL,
	job_id VARCHAR(32),
	stopped_at FLOAT,
	lease_s FLOAT,
	PRIMARY KEY (id)
);
