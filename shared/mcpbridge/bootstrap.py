"""The composition root: settings -> adapters -> services. The only module that imports adapters.

Everything is built lazily on first use, so a Lambda function pays only for the ports it touches and nothing
random or networked is captured at import time (SnapStart restores the same snapshot in many sandboxes).
"""

# Over 400 lines: the composition root holds one cached property per port and service, nothing else.

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcpbridge.identity.accounts import Accounts
from mcpbridge.ports import (
    BlobLinks,
    Blobs,
    Clock,
    Embedder,
    Events,
    ImageDescriber,
    IndexMaintenance,
    Jobs,
    Llm,
    Ocr,
    SearchIndex,
    SecretBox,
    Store,
    Telemetry,
    Workflow,
)
from mcpbridge.settings import Settings, get_settings, settings_secret_values, settings_with_secret

if TYPE_CHECKING:
    import boto3

    from mcpbridge.adapters.index_files.search_index import FileSearchIndex
    from mcpbridge.agent.broker import ToolCallBroker
    from mcpbridge.agent.calls import ToolCalls
    from mcpbridge.agent.discovery import AgentCatalog
    from mcpbridge.agent.external_reads import ExternalReads
    from mcpbridge.agent.gateway import Gateway
    from mcpbridge.agent.policy_gate import PolicyGate
    from mcpbridge.agent.profiles import AgentProfile, AgentProfiles
    from mcpbridge.agent.publications import Publication
    from mcpbridge.agent.steps import OAuthGate, ToolCallSteps
    from mcpbridge.agent.tool_resolution import ToolResolution
    from mcpbridge.agent.tool_search import ToolIndex
    from mcpbridge.agent.webhooks import Webhooks
    from mcpbridge.authserver.access import OAuthAccess
    from mcpbridge.authserver.grant_reviews import GrantReviews
    from mcpbridge.authserver.grants import Grants
    from mcpbridge.authserver.service import AuthorizationService
    from mcpbridge.authserver.tokens import Tokens
    from mcpbridge.client.policies import ToolPolicies
    from mcpbridge.client.pool import ConnectionPools
    from mcpbridge.client.quarantine import ToolQuarantine
    from mcpbridge.client.registry import ServiceRegistry
    from mcpbridge.client.snapshots import Snapshots
    from mcpbridge.client.tool_catalog import ToolCatalog
    from mcpbridge.identity.users import Users
    from mcpbridge.identity.workspaces import Workspaces
    from mcpbridge.knowledge.answers import Answerer
    from mcpbridge.knowledge.ask_sessions import AskSessions
    from mcpbridge.knowledge.bases import KnowledgeBases
    from mcpbridge.knowledge.document_recovery import IndexingRecovery
    from mcpbridge.knowledge.documents import Documents
    from mcpbridge.knowledge.images import DocumentImages
    from mcpbridge.knowledge.line_windows import FileTools
    from mcpbridge.knowledge.reading import DocumentReader
    from mcpbridge.knowledge.search import KnowledgeSearch
    from mcpbridge.knowledge.shares import KnowledgeShares
    from mcpbridge.knowledge.tool_tasks import ToolTasks
    from mcpbridge.knowledge.uploads import DocumentUploads
    from mcpbridge.knowledge.wiki import Wiki
    from mcpbridge.maintenance.failed_jobs import FailedJobs
    from mcpbridge.maintenance.sweep import Sweep
    from mcpbridge.oauth.service_oauth import ServiceOAuth
    from mcpbridge.outbound.policy import EgressPolicy
    from mcpbridge.publishing.endpoints import Endpoint, EndpointService
    from mcpbridge.publishing.image_links import ImageLinks
    from mcpbridge.publishing.rate_limit import RateLimiter
    from mcpbridge.publishing.usage_instructions import UsageWriter
    from mcpbridge.rules.rule_sets import RuleSets
    from mcpbridge.tenancy.user_removal import UserRemoval
    from mcpbridge.tenancy.workspace_purge import WorkspacePurge

log = logging.getLogger("mcpbridge.bootstrap")

_OVERRIDABLE = frozenset(
    {"clock", "store", "secrets", "blobs", "search_index", "embedder", "llm", "egress", "jobs", "telemetry"}
)


class Container:
    """The wired application. Tests build it with other settings or adapters through the same constructor."""

    def __init__(self, settings: Settings, **overrides: Any) -> None:
        """``overrides`` replace, by attribute name, what the settings would build (``store=...``, ``llm=None``)."""
        unknown = set(overrides) - _OVERRIDABLE
        if unknown:
            raise TypeError(f"cannot override {', '.join(sorted(unknown))}")
        self.settings = settings
        self._job_runners: dict[str, Callable[[dict[str, str]], None]] = {}
        self.__dict__.update(overrides)

    def add_job_runner(self, kind: str, run: Callable[[dict[str, str]], None]) -> None:
        """Run the jobs of ``kind`` with ``run``: a kind whose work an edge owns (the MCP edge's Tasks), registered
        by that edge in the process that runs it."""
        self._job_runners[kind] = run

    @cached_property
    def telemetry(self) -> Telemetry:
        """Nothing by default; the Lambda entry points give it Powertools Metrics and Tracer."""
        from mcpbridge.observability import NoTelemetry

        return NoTelemetry()

    @cached_property
    def clock(self) -> Clock:
        from mcpbridge.adapters.system_clock import SystemClock

        return SystemClock()

    @cached_property
    def _aws(self) -> boto3.session.Session:
        import boto3

        return boto3.session.Session(region_name=self.settings.aws_region or None)

    def _aws_client(self, service: str, *, attempts: int = 4, **config: Any) -> Any:
        """A client trying each request ``attempts`` times in all (botocore's ``max_attempts`` counts retries)."""
        from botocore.config import Config

        # AWS_ENDPOINT_URL (read by botocore itself) points every client at moto's server in tests.
        retries: Any = {"mode": "standard", "total_max_attempts": attempts}
        return self._aws.client(service, config=Config(retries=retries, **config))  # type: ignore[call-overload]

    def _within_budget(self, seconds: float, share: float) -> float:
        """``seconds``, or ``share`` of the request budget when that is shorter (no budget: ``seconds``)."""
        budget = self.settings.request_budget_seconds
        return min(seconds, budget * share) if budget else seconds

    @property
    def _request_budget(self) -> float | None:
        return self.settings.request_budget_seconds or None

    @cached_property
    def store(self) -> Store:
        if self.settings.backend == "aws":
            from mcpbridge.adapters.aws.dynamodb import DynamoStore

            client = self._aws_client("dynamodb", connect_timeout=2, read_timeout=5)
            return DynamoStore(client, self.settings.table_name, self.clock)
        from mcpbridge.adapters.local.sqlite import SqliteStore

        return SqliteStore(self.settings.sqlite_path, self.clock)

    @cached_property
    def secrets(self) -> SecretBox:
        if self.settings.backend == "aws":
            from mcpbridge.adapters.aws.kms import KmsSecretBox

            if not self.settings.kms_key_id:
                from mcpbridge.errors import Unavailable

                raise Unavailable("MCPBRIDGE_KMS_KEY_ID is not set", code="secrets_unconfigured")
            client = self._aws_client("kms", connect_timeout=2, read_timeout=5)
            return KmsSecretBox(client, self.settings.kms_key_id)
        from mcpbridge.adapters.local.keyfile import KeyFileSecretBox

        return KeyFileSecretBox(self.settings.key_file)

    @cached_property
    def identity(self) -> Accounts:
        return Accounts(self.store, self.clock)

    @cached_property
    def users(self) -> Users:
        from mcpbridge.identity.users import Users

        return Users(self.store, self.clock)

    @cached_property
    def workspaces(self) -> Workspaces:
        from mcpbridge.identity.workspaces import Workspaces

        return Workspaces(self.store, self.clock, self.jobs)

    @cached_property
    def user_removal(self) -> UserRemoval:
        from mcpbridge.tenancy.user_removal import UserRemoval

        return UserRemoval(
            self.store,
            self.users,
            self.tool_call_records,
            lambda: self.tool_call_steps,
            self._snapshots,
            self.oauth_grants,
        )

    @cached_property
    def workspace_purge(self) -> WorkspacePurge:
        from mcpbridge.tenancy.workspace_purge import WorkspacePurge

        return WorkspacePurge(
            self.store,
            self.workspaces,
            lambda: self.documents,
            lambda: self.blobs,
            self._snapshots,
            self.tool_call_records,
            lambda: self.tool_call_steps,
            self.jobs,
        )

    @cached_property
    def _snapshots(self) -> Snapshots:
        from mcpbridge.client.snapshots import Snapshots

        return Snapshots(self.store, lambda: self.blobs)

    # ------------------------------------------------------------------------------------------ knowledge

    @cached_property
    def blobs(self) -> Blobs:
        if self.settings.backend == "aws":
            from mcpbridge.adapters.aws.s3 import S3Blobs

            return S3Blobs(self._s3, self._bucket())
        from mcpbridge.adapters.local.files import FileBlobs

        return FileBlobs(self.settings.blobs_dir)

    @cached_property
    def _s3(self) -> Any:
        return self._aws_client("s3", connect_timeout=2, read_timeout=30)

    def _bucket(self) -> str:
        if not self.settings.bucket_name:
            from mcpbridge.errors import Unavailable

            raise Unavailable("MCPBRIDGE_BUCKET_NAME is not set", code="blobs_unconfigured")
        return self.settings.bucket_name

    @cached_property
    def search_index(self) -> SearchIndex:
        if self.settings.backend == "aws" and self.settings.search_function:
            from mcpbridge.adapters.aws.lambda_search_index import LambdaSearchIndex

            # Behind API Gateway a search waits within the request's budget; the indexer's writes may take longer.
            wait = self._within_budget(880.0, 0.5)
            client = self._aws_client("lambda", attempts=2, connect_timeout=2, read_timeout=wait)
            return LambdaSearchIndex(client, self.settings.search_function, self.blobs)
        files = self._file_search_index()
        if self.settings.search_engine != "lance":
            return files
        from mcpbridge.adapters.lance.search_index import LanceSearchIndex
        from mcpbridge.adapters.lance.tables import LanceLocation

        settings = self.settings
        if settings.backend != "aws":
            location = LanceLocation.directory(settings.lance_dir)
        else:
            if not settings.lance_commit_table:
                from mcpbridge.errors import Unavailable

                raise Unavailable("MCPBRIDGE_LANCE_COMMIT_TABLE is not set", code="search_index_unconfigured")
            location = LanceLocation.on_s3(
                self._bucket(),
                settings.lance_commit_table,
                region=self._aws.region_name,
                endpoint_url=os.environ.get("AWS_ENDPOINT_URL"),
            )
        return LanceSearchIndex(
            self.store, location, self.clock, self.jobs, legacy=files, optimise_every=settings.lance_optimise_every
        )

    def _file_search_index(self) -> FileSearchIndex:
        from mcpbridge.adapters.index_files.search_index import DirectoryIndexFiles, FileSearchIndex

        if self.settings.backend == "aws":
            from mcpbridge.adapters.aws.s3_search_index import S3IndexFiles

            cache = self.settings.index_cache_dir or Path(tempfile.gettempdir()) / "mcpbridge-indexes"
            files = S3IndexFiles(
                self.store,
                self._s3,
                self._bucket(),
                cache,
                self.clock,
                max_file_bytes=self.settings.index_file_max_bytes,
            )
            return FileSearchIndex(files)
        return FileSearchIndex(DirectoryIndexFiles(self.settings.indexes_dir))

    @property
    def index_maintenance(self) -> IndexMaintenance | None:
        """The search index's upkeep jobs, when its engine has any."""
        index = self.search_index
        return index if isinstance(index, IndexMaintenance) else None

    @cached_property
    def embedder(self) -> Embedder | None:
        settings = self.settings
        provider = settings.embedding_provider
        if provider in ("auto", "local"):
            from mcpbridge.adapters.local.e5_embedder import E5Embedder, local_embedder_unavailable

            reason = local_embedder_unavailable()
            if reason is None:
                return E5Embedder()
            if provider == "local":
                log.warning("semantic search is unavailable: %s", reason)
            return None
        if provider == "bedrock":
            from mcpbridge.adapters.aws.bedrock import BedrockEmbedder

            # Behind API Gateway a query's embedding must leave room for the rest of the request: two tries of a
            # quarter of the budget at most.
            timeout = self._within_budget(settings.embedding_timeout_seconds, 0.25)
            attempts = 2 if self._request_budget else 4
            client = self._aws_client("bedrock-runtime", attempts=attempts, connect_timeout=2, read_timeout=timeout)
            model = settings.embedding_model or "amazon.titan-embed-text-v2:0"
            return BedrockEmbedder(client, model_id=model, dimensions=settings.embedding_dimensions or None)
        if provider == "openai":
            from mcpbridge.adapters.openai_compatible import OpenAIEmbedder

            return OpenAIEmbedder(
                settings.embedding_base_url or "https://api.openai.com/v1",
                settings.embedding_api_key,
                model=settings.embedding_model or "text-embedding-3-small",
                # 0: the model's own size (Ollama and most local servers ignore a requested size).
                dimensions=settings.embedding_dimensions or None,
                timeout=self._within_budget(settings.embedding_timeout_seconds, 0.25),
                timeout_per_text=settings.embedding_timeout_per_text_seconds,
                attempts=min(settings.embedding_attempts, 2) if self._request_budget else settings.embedding_attempts,
                roles=settings.embedding_roles,
                query_prefix=settings.embedding_query_prefix,
                passage_prefix=settings.embedding_passage_prefix,
            )
        return None

    @cached_property
    def llm(self) -> Llm | None:
        settings = self.settings
        if settings.llm_provider == "bedrock":
            from mcpbridge.adapters.aws.bedrock import BedrockLlm

            # One try within the budget (less the search before it): a retry would outlast the request.
            timeout = self._within_budget(settings.llm_timeout_seconds, 0.75)
            attempts = 1 if self._request_budget else 4
            client = self._aws_client("bedrock-runtime", attempts=attempts, connect_timeout=2, read_timeout=timeout)
            return BedrockLlm(client, model_id=settings.llm_model or "anthropic.claude-3-5-haiku-20241022-v1:0")
        if settings.llm_provider == "openai":
            from mcpbridge.adapters.openai_compatible import OpenAIChat

            return OpenAIChat(
                settings.llm_base_url or "https://api.openai.com/v1",
                settings.llm_api_key,
                model=settings.llm_model or "gpt-4o-mini",
                timeout=self._within_budget(settings.llm_timeout_seconds, 0.75),
            )
        return None

    @cached_property
    def egress(self) -> EgressPolicy:
        from mcpbridge.outbound.policy import EgressPolicy

        return EgressPolicy.from_settings(self.settings)

    @cached_property
    def jobs(self) -> Jobs:
        mode = self._jobs_mode()
        if mode == "lambda":
            from mcpbridge.adapters.aws.lambda_jobs import LambdaJobs

            return LambdaJobs(
                self._aws_client("lambda", connect_timeout=2, read_timeout=10), self.settings.indexer_function
            )
        from mcpbridge.adapters.local.jobs import InlineJobs, ThreadJobs

        return InlineJobs(self.run_job) if mode == "inline" else ThreadJobs(self.run_job, on_failure=self._job_failed)

    def _jobs_mode(self) -> str:
        mode = self.settings.jobs
        if mode == "auto":
            mode = "lambda" if self.settings.backend == "aws" and self.settings.indexer_function else "threads"
        return mode

    def _job_failed(self, kind: str, payload: dict[str, str], exc: Exception, attempts: int) -> None:
        """A local job the thread pool gave up on: recorded as the failed-jobs consumer records one on AWS."""
        from mcpbridge.maintenance.failed_jobs import failed_job_from

        self.failed_jobs.record(failed_job_from(kind, payload, exc, attempts))

    @cached_property
    def indexing_recovery(self) -> IndexingRecovery:
        from mcpbridge.knowledge.document_recovery import IndexingRecovery

        return IndexingRecovery(
            self.store, self.clock, self.documents, deadline_seconds=self.settings.indexing_deadline_seconds
        )

    @cached_property
    def failed_jobs(self) -> FailedJobs:
        from mcpbridge.maintenance.failed_jobs import FailedJobs

        return FailedJobs(self.store, self.clock, self.jobs, self.indexing_recovery, self.knowledge_bases)

    @cached_property
    def sweep(self) -> Sweep:
        from mcpbridge.maintenance.sweep import Sweep

        return Sweep(self.indexing_recovery, self.tool_call_records, self.telemetry, lambda: self.webhooks)

    def run_job(self, kind: str, payload: dict[str, str]) -> None:
        """Carry out one background job (called by the thread pool, or by the indexer Lambda function)."""
        from mcpbridge.tenancy.jobs import run_job

        if kind == "webhook.deliver":
            self.webhooks.deliver(payload["workspace_id"], payload["webhook_id"], payload["delivery_id"])
            return
        registered = self._job_runners.get(kind)
        if registered is not None:
            registered(payload)
            return

        run_job(
            kind,
            payload,
            purge=lambda: self.workspace_purge,
            documents=lambda: self.documents,
            maintenance=lambda: self.index_maintenance,
        )

    @cached_property
    def knowledge_bases(self) -> KnowledgeBases:
        from mcpbridge.knowledge.bases import KnowledgeBases

        return KnowledgeBases(self.store, self.clock, self.jobs)

    @cached_property
    def knowledge_shares(self) -> KnowledgeShares:
        from mcpbridge.knowledge.shares import KnowledgeShares

        return KnowledgeShares(self.store, self.clock, self.knowledge_bases)

    @cached_property
    def documents(self) -> Documents:
        from mcpbridge.knowledge.documents import Documents

        return Documents(
            self.store,
            self.blobs,
            self.search_index,
            self.jobs,
            self.clock,
            self.knowledge_bases,
            embedder=self.embedder,
            egress=self.egress,
            max_bytes=self.settings.max_document_bytes,
            max_request_bytes=self.settings.max_request_document_bytes,
            fetch_timeout=self.settings.url_fetch_timeout_seconds,
            images=self.document_images,
        )

    @cached_property
    def _ocr_and_reason(self) -> tuple[Ocr | None, str | None]:
        engine = self.settings.ocr_engine
        if engine == "none":
            return None, "text recognition is turned off (MCPBRIDGE_OCR_ENGINE=none)"
        if engine == "textract" or (engine == "auto" and self.settings.backend == "aws"):
            from mcpbridge.adapters.aws.textract_ocr import TextractOcr

            return TextractOcr(self._aws_client("textract", connect_timeout=2, read_timeout=60)), None
        from mcpbridge.adapters.local.tesseract_ocr import TesseractOcr, tesseract_unavailable

        reason = tesseract_unavailable()
        if reason is not None:
            if engine == "tesseract":
                log.warning("text recognition is unavailable: %s", reason)
            return None, reason
        return TesseractOcr(self.settings.ocr_languages), None

    @property
    def ocr(self) -> Ocr | None:
        return self._ocr_and_reason[0]

    @cached_property
    def document_images(self) -> DocumentImages:
        from mcpbridge.knowledge.images import DocumentImages

        ocr, reason = self._ocr_and_reason
        llm = self.llm
        describer = llm if self.settings.llm_vision and isinstance(llm, ImageDescriber) else None
        if llm is None:
            captions = "no language model is configured"
        else:
            captions = f"the configured model ({llm.name}) is not declared to read images (MCPBRIDGE_LLM_VISION)"
        return DocumentImages(
            self.store,
            self.blobs,
            ocr,
            ocr_unavailable=reason,
            describer=describer,
            captions_unavailable=captions,
        )

    @cached_property
    def image_links(self) -> ImageLinks:
        from mcpbridge.publishing.image_links import ImageLinks

        blobs = self.blobs
        return ImageLinks(
            self.store,
            self.clock,
            blobs,
            self.endpoints,
            links=blobs if isinstance(blobs, BlobLinks) else None,
            seconds=self.settings.image_link_seconds,
        )

    @cached_property
    def uploads(self) -> DocumentUploads:
        from mcpbridge.knowledge.uploads import DocumentUploads

        return DocumentUploads(self.store, self.blobs, self.clock, self.knowledge_bases, self.documents)

    @cached_property
    def knowledge_search(self) -> KnowledgeSearch:
        from mcpbridge.knowledge.search import KnowledgeSearch

        return KnowledgeSearch(self.knowledge_bases, self.documents, self.search_index, self.embedder)

    @cached_property
    def reader(self) -> DocumentReader:
        from mcpbridge.knowledge.reading import DocumentReader

        return DocumentReader(self.documents, self.search_index)

    @cached_property
    def wiki(self) -> Wiki:
        from mcpbridge.knowledge.wiki import Wiki

        return Wiki(self.store, self.clock, self.knowledge_bases)

    @cached_property
    def endpoints(self) -> EndpointService:
        from mcpbridge.publishing.endpoints import EndpointService

        return EndpointService(self.store, self.clock, self.knowledge_bases, self._service_exists)

    def _service_exists(self, workspace_id: str, service_id: str) -> bool:
        from mcpbridge.errors import NotFound

        try:
            self.services.find(workspace_id, service_id)
        except NotFound:
            return False
        return True

    # -- mcpbridge as the authorization server of its endpoints ------------------------------------------------

    @cached_property
    def oauth_grants(self) -> Grants:
        from mcpbridge.authserver.grants import Grants

        return Grants(self.store, self.clock)

    @cached_property
    def oauth_grant_reviews(self) -> GrantReviews:
        """Grants as the REST API lists and revokes them, within the caller's authority."""
        from mcpbridge.authserver.grant_reviews import GrantReviews

        return GrantReviews(self.oauth_grants, self.users, self.endpoints)

    @cached_property
    def oauth_tokens(self) -> Tokens:
        from mcpbridge.authserver.tokens import Tokens

        settings = self.settings
        return Tokens(
            self.store,
            self.clock,
            self.secrets,
            access_seconds=settings.oauth_access_token_seconds,
            refresh_seconds=settings.oauth_refresh_token_seconds,
            grace_seconds=settings.oauth_refresh_grace_seconds,
        )

    @cached_property
    def oauth_access(self) -> OAuthAccess:
        """What an OAuth access token opens on /mcp/<ep> (the MCP endpoint's request path: no Authlib)."""
        from mcpbridge.authserver.access import OAuthAccess

        return OAuthAccess(self.endpoints, self.oauth_grants, self.oauth_tokens)

    @cached_property
    def authorization(self) -> AuthorizationService:
        """The authorization server: metadata, sign-in and consent, token, registration, revocation."""
        import ssl

        from mcpbridge.authserver.clients import Clients
        from mcpbridge.authserver.oidc import OidcSettings, OidcSignIn
        from mcpbridge.authserver.service import AuthorizationService
        from mcpbridge.authserver.throttles import Throttles
        from mcpbridge.identity.sign_in import SignInIdentities

        settings = self.settings
        context = None
        if settings.outbound_ca_file is not None:
            context = ssl.create_default_context()
            context.load_verify_locations(cafile=str(settings.outbound_ca_file))
        oidc = None
        if settings.oidc_issuer:
            oidc = OidcSignIn(
                OidcSettings(
                    issuer=settings.oidc_issuer,
                    client_id=settings.oidc_client_id,
                    client_secret=settings.oidc_client_secret,
                    scopes=settings.oidc_scopes,
                    provider_name=settings.oidc_provider_name,
                    match=settings.oidc_match,
                    provision=settings.oidc_provision,
                    allowed_domains=tuple(settings.oidc_allowed_domains),
                ),
                store=self.store,
                clock=self.clock,
                secrets_box=self.secrets,
                egress=self.egress,
                ssl_context=context,
            )
        return AuthorizationService(
            store=self.store,
            clock=self.clock,
            secrets_box=self.secrets,
            endpoints=self.endpoints,
            accounts=self.identity,
            clients=Clients(self.store, self.clock, self.egress, ssl_context=context),
            grants=self.oauth_grants,
            tokens=self.oauth_tokens,
            oidc=oidc,
            identities=SignInIdentities(self.store, self.clock, self.users),
            throttles=Throttles(
                self.rate_limiter,
                registrations_per_minute=settings.oauth_registrations_per_minute,
                sign_ins_per_minute=settings.oauth_sign_ins_per_minute,
                max_unused_clients=settings.oauth_max_unused_clients,
            ),
        )

    @cached_property
    def rate_limiter(self) -> RateLimiter:
        from mcpbridge.publishing.rate_limit import RateLimiter

        return RateLimiter(self.store, self.clock, telemetry=self.telemetry)

    @cached_property
    def services(self) -> ServiceRegistry:
        from mcpbridge.client.policies import PolicyRows
        from mcpbridge.client.quarantine import PinRows
        from mcpbridge.client.registry import ServiceRegistry
        from mcpbridge.oauth.rows import OAuthRows

        dependents = (PolicyRows(self.store), self._snapshots, OAuthRows(self.store), PinRows(self.store))
        return ServiceRegistry(self.store, self.clock, self.secrets, self.egress, dependents=dependents)

    @cached_property
    def tool_policies(self) -> ToolPolicies:
        from mcpbridge.client.policies import ToolPolicies

        return ToolPolicies(self.store, self.clock, self.services, self._snapshots)

    @cached_property
    def catalog(self) -> ToolCatalog:
        from mcpbridge.client.specs import SpecSource
        from mcpbridge.client.tool_catalog import ToolCatalog

        return ToolCatalog(
            self.store,
            lambda: self.blobs,
            self.clock,
            self.services,
            self.tool_policies,
            self.egress,
            SpecSource(self.services, lambda: self.oauth),
            telemetry=self.telemetry,
            request_budget=self._request_budget,
            snapshots=self._snapshots,
            quarantine=self.tool_quarantine,
        )

    @cached_property
    def tool_quarantine(self) -> ToolQuarantine:
        from mcpbridge.client.quarantine import ToolQuarantine

        return ToolQuarantine(self.store, self.clock, self.services, self._snapshots)

    @cached_property
    def connections(self) -> ConnectionPools:
        """Cached connections to external services, per event loop; a service changed through this process closes
        its own at once (other instances notice through the connection's fingerprint)."""
        from mcpbridge.client.pool import ConnectionPools

        pools = ConnectionPools(self.egress)
        self.services.on_connection_change(pools.forget_service)
        return pools

    @cached_property
    def agent_profiles(self) -> AgentProfiles:
        from mcpbridge.agent.profiles import AgentProfiles

        return AgentProfiles(self.store, self.clock, self.services)

    @cached_property
    def agent_catalog(self) -> AgentCatalog:
        """What agents discover; needs_auth is judged from the snapshots until an OAuth-aware check is wired here;
        searches mark tools of OAuth services with the caller's connection (its token states)."""
        from mcpbridge.agent.discovery import AgentCatalog

        return AgentCatalog(
            self.store,
            self.clock,
            self.services,
            self.catalog,
            self.tool_policies,
            quarantine=self.tool_quarantine,
            search=self.tool_index,
            connections=lambda principal: {c.service_id: c.status for c in self.oauth.connections(principal)},
        )

    @cached_property
    def external_reads(self) -> ExternalReads:
        """Agents' live reads of external services' resources and prompts, and their catalog refreshes."""
        from mcpbridge.agent.external_reads import ExternalReads
        from mcpbridge.client.specs import SpecSource

        return ExternalReads(
            self.services,
            self.catalog,
            self.connections,
            SpecSource(self.services, lambda: self.oauth),
            self.rate_limiter,
            request_budget=self._request_budget,
        )

    @cached_property
    def tool_index(self) -> ToolIndex:
        """Tool search on the knowledge search engine and embedder, both built on first search."""
        from mcpbridge.agent.tool_search import ToolIndex

        return ToolIndex(self.store, lambda: self.search_index, lambda: self.embedder)

    @cached_property
    def answers(self) -> Answerer:
        from mcpbridge.knowledge.answers import Answerer

        return Answerer(self.store, self.clock, self.knowledge_search, self.llm, images=self.document_images)

    @cached_property
    def usage_writer(self) -> UsageWriter:
        from mcpbridge.publishing.usage_instructions import UsageWriter

        return UsageWriter(self.endpoints, self.knowledge_bases, self.llm)

    @cached_property
    def file_tools(self) -> FileTools:
        from mcpbridge.knowledge.line_windows import FileTools

        return FileTools(self.documents, self.knowledge_bases)

    @cached_property
    def ask_sessions(self) -> AskSessions:
        from mcpbridge.knowledge.ask_sessions import AskSessions

        return AskSessions(self.store, self.clock)

    @cached_property
    def tool_tasks(self) -> ToolTasks:
        """``ask`` and ``add_document`` as Tasks; their runs are jobs (this process's, unless the indexer's)."""
        from mcpbridge.knowledge.tool_tasks import ToolTasks

        return ToolTasks(self.store, self.clock, self.jobs, in_process=self._jobs_mode() != "lambda")

    @cached_property
    def oauth(self) -> ServiceOAuth:
        """OAuth for external services (authorize, callback, tokens); listeners are added by whoever needs them."""
        from mcpbridge.oauth.service_oauth import ServiceOAuth

        settings = self.settings
        manager = ServiceOAuth(
            store=self.store,
            clock=self.clock,
            secrets=self.secrets,
            registry=self.services,
            egress=self.egress,
            public_base_url=settings.public_base_url,
            frontend_urls=settings.frontend_urls,
            client_metadata_url=settings.oauth_client_metadata_url,
            telemetry=self.telemetry,
        )
        # A user's token changed or went: their cached connections close (only if this process opened any), and
        # their calls waiting for the token resume (the broker is built on demand, in whichever function stored it).
        manager.on_token_stored(self._forget_connections_of)
        manager.on_token_stored(lambda *principal: self.tool_calls.on_token_stored(*principal))
        manager.on_token_removed(self._forget_connections_of)
        return manager

    def _forget_connections_of(
        self, workspace_id: str, service_id: str, principal_type: str, principal_id: str
    ) -> None:
        if "connections" in self.__dict__:
            self.connections.forget_principal(service_id, principal_type, principal_id)

    # -- agent tool calls ---------------------------------------------------------------------------------------

    @cached_property
    def events(self) -> Events:
        if self.settings.backend == "aws" and self.settings.event_bus_name:
            from mcpbridge.adapters.aws.eventbridge import EventBridgeEvents

            client = self._aws_client("events", connect_timeout=2, read_timeout=5)
            inner: Events = EventBridgeEvents(client, self.settings.event_bus_name)
        else:
            from mcpbridge.adapters.local.events import LogEvents

            inner = LogEvents()
        from mcpbridge.agent.webhooks import WebhookEvents

        return WebhookEvents(inner, lambda: self.webhooks)

    @cached_property
    def webhooks(self) -> Webhooks:
        """Webhooks of call events; deliveries run as jobs (the thread pool, or the indexer function on AWS)."""
        from mcpbridge.agent.webhook_bodies import GuardedSender
        from mcpbridge.agent.webhooks import Webhooks

        sender = GuardedSender(self.egress)
        return Webhooks(
            self.store,
            self.clock,
            self.secrets,
            lambda: self.jobs,
            sender.check,
            sender,
            public_base_url=self.settings.public_base_url,
        )

    @cached_property
    def workflow(self) -> Workflow:
        """Step Functions when a state machine is configured (AWS); otherwise the in-process workflow."""
        if self._uses_step_functions:
            from mcpbridge.adapters.aws.stepfunctions import StepFunctionsWorkflow

            client = self._aws_client("stepfunctions", connect_timeout=2, read_timeout=10)
            return StepFunctionsWorkflow(client, self.settings.state_machine_arn)
        from mcpbridge.adapters.local.workflow import LocalWorkflow
        from mcpbridge.agent.loop import StepLoop

        loop = StepLoop(lambda: self.tool_call_steps, lambda: self.tool_call_records, self.clock)
        return LocalWorkflow(loop.run, loop.unfinished)

    @property
    def _uses_step_functions(self) -> bool:
        return self.settings.backend == "aws" and bool(self.settings.state_machine_arn)

    @cached_property
    def tool_call_records(self) -> ToolCalls:
        from mcpbridge.agent.calls import ToolCalls

        return ToolCalls(
            self.store,
            self.clock,
            self.secrets,
            self.telemetry,
            retention_seconds=self.settings.call_retention_days * 86_400,
        )

    @cached_property
    def tool_resolution(self) -> ToolResolution:
        from mcpbridge.agent.tool_resolution import ToolResolution

        return ToolResolution(
            self.store,
            self.services,
            self.agent_catalog,
            self.agent_profiles,
            self.catalog,
            endpoint_profile=self._endpoint_profile,
        )

    def _endpoint_profile(self, workspace_id: str, endpoint_id: str) -> AgentProfile | None:
        """The profile the calls through a published endpoint run under: its external services as the selection."""
        endpoint = self.endpoints.find(endpoint_id)
        if endpoint is None or endpoint.workspace_id != workspace_id:
            return None
        return self.publication_of(endpoint).profile

    def publication_of(self, endpoint: Endpoint) -> Publication:
        from mcpbridge.agent.publications import publication_of

        return publication_of(
            endpoint.id,
            endpoint.workspace_id,
            endpoint.name,
            endpoint.services,
            search_mode=endpoint.external_tool_mode == "search",
        )

    @cached_property
    def gateway(self) -> Gateway:
        from mcpbridge.agent.gateway import Gateway

        return Gateway(self.agent_catalog, lambda: self.tool_calls, self.secrets)

    @cached_property
    def tool_call_steps(self) -> ToolCallSteps:
        from mcpbridge.agent.invoke import ToolInvoker
        from mcpbridge.agent.steps import ToolCallSteps

        invoker = ToolInvoker(self.services, self.connections, self.oauth, self.telemetry)
        return ToolCallSteps(
            self.tool_call_records,
            self.clock,
            invoker,
            lambda: self.workflow,
            self.events,
            self.tool_resolution,
            self._oauth_gate,
            gate=self.policy_gate,
        )

    @cached_property
    def rule_sets(self) -> RuleSets:
        from mcpbridge.rules.rule_sets import RuleSets

        return RuleSets(self.store, self.clock, self._user_exists)

    def _user_exists(self, workspace_id: str, user_id: str) -> bool:
        from mcpbridge.errors import NotFound

        try:
            self.users.find(workspace_id, user_id)
        except NotFound:
            return False
        return True

    @cached_property
    def policy_gate(self) -> PolicyGate:
        from mcpbridge.agent.policy_gate import PolicyGate
        from mcpbridge.rules.history import HistoryLog

        return PolicyGate(self.rule_sets, HistoryLog(self.store, self.clock), self.clock)

    @cached_property
    def tool_calls(self) -> ToolCallBroker:
        from mcpbridge.agent.broker import ToolCallBroker

        return ToolCallBroker(
            self.tool_call_records,
            self.clock,
            self.services,
            self.tool_call_steps,
            lambda: self.workflow,
            self.events,
            self.tool_resolution,
            self.tool_policies,
            self._oauth_gate,
            store=self.store,
            callbacks_supported=self._uses_step_functions,
            user_usable=self.identity.user_usable,
            request_budget=self._request_budget,
            gate=self.policy_gate,
        )

    @cached_property
    def _oauth_gate(self) -> OAuthGate:
        from mcpbridge.agent.oauth_gate import ServiceOAuthGate
        from mcpbridge.oauth.tokens import TokenStore

        return ServiceOAuthGate(self.oauth, TokenStore(self.store, self.clock, self.secrets), self.clock)

    def preload(self, *, sealing: bool = True) -> None:
        """Import the backend's adapter modules now (no client, no I/O), so a SnapStart snapshot holds them and
        the first request does not pay for them. ``sealing=False``: not the key service's (KMS, cryptography's
        AEAD), which only the requests that seal or unseal a secret use."""
        if self.settings.backend == "aws":
            import mcpbridge.adapters.aws.dynamodb

            if sealing:
                import mcpbridge.adapters.aws.kms  # noqa: F401

    def close(self) -> None:
        """Finish background jobs, then close what holds files or connections (only what was built)."""
        for name in ("jobs", "search_index", "store"):
            close = getattr(self.__dict__.get(name), "close", None)
            if close is not None:
                close()


def load_settings() -> Settings:
    """The environment's settings and, when ``MCPBRIDGE_SETTINGS_SECRET_ARN`` names a secret, the secret settings it
    holds (an environment variable that is set and not empty wins). Raises
    :class:`~mcpbridge.settings.SettingsSecretError` when the secret cannot be read or holds anything else."""
    settings = get_settings()
    if not settings.settings_secret_arn:
        return settings
    from mcpbridge.adapters.aws.settings_secret import read_settings_secret

    arn = settings.settings_secret_arn
    values = settings_secret_values(read_settings_secret(arn, settings.aws_region), arn)
    loaded = settings_with_secret(settings, values)
    log.info("settings read from the settings secret: %s", ", ".join(sorted(values)) or "none")
    return loaded


def build_container(settings: Settings | None = None, **overrides: Any) -> Container:
    """The container of ``settings``, else of :func:`load_settings` (the environment and the settings secret)."""
    return Container(settings or load_settings(), **overrides)
