"""Settings of the APIs served: authentication, rate and size limits, tenancy limits, the
audit log, metrics access and TLS (docs/api.md), and the OpenAI-compatible gateway
(docs/gateway.md).

A base of `config.Settings`, never built on its own. Split from `config` only for size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings

__all__ = ["ApiSettings"]


class ApiSettings(BaseSettings):
    """The API and gateway settings (fields of `Settings`, in its order)."""

    auth: Literal["on", "off"] = Field(
        "off",
        description="Require bearer tokens (on) or treat every caller as the anonymous admin "
        "(off, logged as a warning at startup). On first start with auth on, an admin token "
        "is created and written to <data_dir>/admin-token (mode 0600).",
    )
    rate_limit_per_second: float = Field(
        50.0, ge=0, description="Requests per second per token (token bucket); 0 = no limit."
    )
    rate_limit_burst: float = Field(
        100.0, ge=1, description="Token-bucket size: requests a token may make at once."
    )
    auth_failures_per_minute: int = Field(
        20,
        ge=0,
        description="Unknown or revoked tokens one client address may present per minute; "
        "past that its requests are answered 429 until the minute has passed (0 = no limit).",
    )
    max_queued_jobs_per_tenant: int = Field(
        0, ge=0, description="Jobs a tenant may have waiting to run; more are 429 (0 = no limit)."
    )
    max_pending_gpus_per_tenant: int = Field(
        0,
        ge=0,
        description="GPUs a tenant's waiting jobs may ask for in all; more are 429 (0 = no limit).",
    )
    max_argv_bytes: int = Field(
        128 << 10, gt=0, description="Largest job argv (bytes, each argument plus a NUL)."
    )
    max_env_vars: int = Field(256, gt=0, description="Most environment variables per job.")
    max_env_bytes: int = Field(
        64 << 10, gt=0, description="Largest job environment (bytes, each KEY=VALUE plus a NUL)."
    )
    max_gpus_per_job: int = Field(1024, gt=0, description="Most GPUs one job may ask for.")
    max_array_size: int = Field(
        1_000_000,
        gt=0,
        le=1 << 31,
        description="Job arrays: indices must be below this (like Slurm's MaxArraySize).",
    )
    audit_file: Path | None = Field(
        None, description="The hash-chained audit log (JSON lines); none = <data_dir>/audit.jsonl."
    )
    audit_key_file: Path | None = Field(
        None,
        description="A secret key (kept outside the data directory) that seals the audit "
        "chain with an HMAC: `audit verify` then detects a cut tail or a re-hashed chain. "
        "Created (mode 0600) if missing; none = chain hashes only.",
    )
    max_request_bytes: int = Field(
        1 << 20,
        gt=0,
        description="Largest REST request body and gRPC API message (bytes); larger is 413 / "
        "RESOURCE_EXHAUSTED, refused before it is read whole.",
    )
    api_workers: int = Field(
        0,
        ge=0,
        le=64,
        description="Processes that serve the gRPC API port beside the server (SO_REUSEPORT) "
        "and hand it SubmitJob calls in batches; 0 = the server serves the port itself "
        "(docs/operations.md, API workers).",
    )
    metrics_auth: Literal["none", "token"] = Field(
        "none",
        description="/metrics: none = anyone may scrape; token = a viewer, operator or admin "
        "bearer token is required (the exposition names tenants and jobs).",
    )
    agent_metrics_token_file: Path | None = Field(
        None,
        description="An agent's /metrics (--metrics-port) requires `Authorization: Bearer` "
        "with this file's contents; none = anyone who reaches the port may scrape.",
    )
    tls_cert_file: Path | None = Field(
        None, description="PEM certificate for REST and gRPC; with tls_key_file turns TLS on."
    )
    tls_key_file: Path | None = Field(None, description="PEM private key of tls_cert_file.")
    tls_client_ca_file: Path | None = Field(
        None,
        description="PEM CA bundle: when set (with TLS on), REST and gRPC require client "
        "certificates signed by it (mTLS).",
    )

    # -- OpenAI-compatible gateway (docs/gateway.md) ------------------------------------------
    gateway: Literal["on", "off"] = Field(
        "on",
        description="Serve /v1/chat/completions, /v1/completions, /v1/embeddings and "
        "/v1/models on the REST port, proxied to the replicas of each model.",
    )
    gateway_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Serve the gateway on this port (its own thread and event loop) instead "
        "of the REST port; 0 = any free port (reported in ports.json as 'gateway').",
    )
    gateway_requests_per_second: float = Field(
        0.0, ge=0, description="Gateway requests per second per API key; 0 = no limit."
    )
    gateway_request_burst: float = Field(
        50.0, ge=1, description="Gateway requests an API key may send at once."
    )
    gateway_tokens_per_minute: float = Field(
        0.0, ge=0, description="Prompt + completion tokens per minute per API key; 0 = no limit."
    )
    gateway_retries: int = Field(
        2, ge=0, le=10, description="Other replicas to try after one refused the connection."
    )
    gateway_max_body_bytes: int = Field(
        16 << 20, gt=0, description="Largest gateway request body (bytes); larger is 413."
    )
    gateway_read_timeout_seconds: float = Field(
        600.0, gt=0, description="Longest wait for a replica's next bytes before giving up."
    )
    gateway_session_header: str = Field(
        "X-Session-Id",
        min_length=1,
        description="Requests with the same value of this header go to the same replica.",
    )
    gateway_routes_file: Path | None = Field(
        None,
        description="Also route to the models listed in this JSON file (replicas the platform "
        "does not run); re-read when it changes.",
    )
