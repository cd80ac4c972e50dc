"""What the REST routes are given: each service of the container as a typed FastAPI dependency, so a route names
the services it uses in its signature and never reaches into the container itself. The container builds each one
lazily, once, on first use: a function pays only for what its routes touch. The providers are coroutines, so a
request reads a built service on the event loop: FastAPI runs a plain ``def`` dependency in a worker thread, a hop
per dependency per request."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, cast

from fastapi import Depends, Request

from mcpbridge.http.auth import service_of

if TYPE_CHECKING:
    from mcpbridge.agent.broker import ToolCallBroker
    from mcpbridge.agent.discovery import AgentCatalog
    from mcpbridge.agent.profiles import AgentProfiles
    from mcpbridge.client.policies import ToolPolicies
    from mcpbridge.client.registry import ServiceRegistry
    from mcpbridge.client.tool_catalog import ToolCatalog
    from mcpbridge.identity.accounts import Accounts
    from mcpbridge.identity.users import Users
    from mcpbridge.identity.workspaces import Workspaces
    from mcpbridge.knowledge.answers import Answerer
    from mcpbridge.knowledge.ask_sessions import AskSessions
    from mcpbridge.knowledge.bases import KnowledgeBases
    from mcpbridge.knowledge.documents import Documents
    from mcpbridge.knowledge.line_windows import FileTools
    from mcpbridge.knowledge.reading import DocumentReader
    from mcpbridge.knowledge.search import KnowledgeSearch
    from mcpbridge.knowledge.uploads import DocumentUploads
    from mcpbridge.knowledge.wiki import Wiki
    from mcpbridge.oauth.service_oauth import ServiceOAuth
    from mcpbridge.outbound.policy import EgressPolicy
    from mcpbridge.ports import SecretBox, Store
    from mcpbridge.publishing.endpoints import EndpointService
    from mcpbridge.publishing.usage_instructions import UsageWriter
    from mcpbridge.settings import Settings
    from mcpbridge.tenancy.user_removal import UserRemoval


async def _accounts(request: Request) -> Accounts:
    return cast("Accounts", await service_of(request, "identity"))


async def _users(request: Request) -> Users:
    return cast("Users", await service_of(request, "users"))


async def _workspaces(request: Request) -> Workspaces:
    return cast("Workspaces", await service_of(request, "workspaces"))


async def _user_removal(request: Request) -> UserRemoval:
    return cast("UserRemoval", await service_of(request, "user_removal"))


async def _bases(request: Request) -> KnowledgeBases:
    return cast("KnowledgeBases", await service_of(request, "knowledge_bases"))


async def _documents(request: Request) -> Documents:
    return cast("Documents", await service_of(request, "documents"))


async def _uploads(request: Request) -> DocumentUploads:
    return cast("DocumentUploads", await service_of(request, "uploads"))


async def _reader(request: Request) -> DocumentReader:
    return cast("DocumentReader", await service_of(request, "reader"))


async def _knowledge(request: Request) -> KnowledgeSearch:
    return cast("KnowledgeSearch", await service_of(request, "knowledge_search"))


async def _answerer(request: Request) -> Answerer:
    return cast("Answerer", await service_of(request, "answers"))


async def _ask_sessions(request: Request) -> AskSessions:
    return cast("AskSessions", await service_of(request, "ask_sessions"))


async def _file_tools(request: Request) -> FileTools:
    return cast("FileTools", await service_of(request, "file_tools"))


async def _usage_writer(request: Request) -> UsageWriter:
    return cast("UsageWriter", await service_of(request, "usage_writer"))


async def _wiki(request: Request) -> Wiki:
    return cast("Wiki", await service_of(request, "wiki"))


async def _semantic(request: Request) -> bool:
    return await service_of(request, "embedder") is not None


async def _endpoints(request: Request) -> EndpointService:
    return cast("EndpointService", await service_of(request, "endpoints"))


async def _registry(request: Request) -> ServiceRegistry:
    return cast("ServiceRegistry", await service_of(request, "services"))


async def _catalog(request: Request) -> ToolCatalog:
    return cast("ToolCatalog", await service_of(request, "catalog"))


async def _policies(request: Request) -> ToolPolicies:
    return cast("ToolPolicies", await service_of(request, "tool_policies"))


async def _oauth(request: Request) -> ServiceOAuth:
    return cast("ServiceOAuth", await service_of(request, "oauth"))


async def _egress(request: Request) -> EgressPolicy:
    return cast("EgressPolicy", await service_of(request, "egress"))


async def _profiles(request: Request) -> AgentProfiles:
    return cast("AgentProfiles", await service_of(request, "agent_profiles"))


async def _discovery(request: Request) -> AgentCatalog:
    return cast("AgentCatalog", await service_of(request, "agent_catalog"))


async def _broker(request: Request) -> ToolCallBroker:
    return cast("ToolCallBroker", await service_of(request, "tool_calls"))


async def _settings(request: Request) -> Settings:
    return cast("Settings", await service_of(request, "settings"))


async def _store(request: Request) -> Store:
    return cast("Store", await service_of(request, "store"))


async def _secrets(request: Request) -> SecretBox:
    return cast("SecretBox", await service_of(request, "secrets"))


# Type checkers see each service's class; at run time FastAPI needs only the provider, so the service modules are
# not imported until a route asks for them (cold start).
if TYPE_CHECKING:
    AccountsDep = Annotated[Accounts, Depends(_accounts)]
    UsersDep = Annotated[Users, Depends(_users)]
    WorkspacesDep = Annotated[Workspaces, Depends(_workspaces)]
    UserRemovalDep = Annotated[UserRemoval, Depends(_user_removal)]
    KnowledgeBasesDep = Annotated[KnowledgeBases, Depends(_bases)]
    DocumentsDep = Annotated[Documents, Depends(_documents)]
    UploadsDep = Annotated[DocumentUploads, Depends(_uploads)]
    ReaderDep = Annotated[DocumentReader, Depends(_reader)]
    KnowledgeSearchDep = Annotated[KnowledgeSearch, Depends(_knowledge)]
    AnswererDep = Annotated[Answerer, Depends(_answerer)]
    AskSessionsDep = Annotated[AskSessions, Depends(_ask_sessions)]
    FileToolsDep = Annotated[FileTools, Depends(_file_tools)]
    UsageWriterDep = Annotated[UsageWriter, Depends(_usage_writer)]
    WikiDep = Annotated[Wiki, Depends(_wiki)]
    SemanticDep = Annotated[bool, Depends(_semantic)]
    EndpointsDep = Annotated[EndpointService, Depends(_endpoints)]
    RegistryDep = Annotated[ServiceRegistry, Depends(_registry)]
    CatalogDep = Annotated[ToolCatalog, Depends(_catalog)]
    PoliciesDep = Annotated[ToolPolicies, Depends(_policies)]
    OAuthDep = Annotated[ServiceOAuth, Depends(_oauth)]
    EgressDep = Annotated[EgressPolicy, Depends(_egress)]
    ProfilesDep = Annotated[AgentProfiles, Depends(_profiles)]
    DiscoveryDep = Annotated[AgentCatalog, Depends(_discovery)]
    BrokerDep = Annotated[ToolCallBroker, Depends(_broker)]
    SettingsDep = Annotated[Settings, Depends(_settings)]
    StoreDep = Annotated[Store, Depends(_store)]
    SecretsDep = Annotated[SecretBox, Depends(_secrets)]
else:
    AccountsDep = Annotated[Any, Depends(_accounts)]
    UsersDep = Annotated[Any, Depends(_users)]
    WorkspacesDep = Annotated[Any, Depends(_workspaces)]
    UserRemovalDep = Annotated[Any, Depends(_user_removal)]
    KnowledgeBasesDep = Annotated[Any, Depends(_bases)]
    DocumentsDep = Annotated[Any, Depends(_documents)]
    UploadsDep = Annotated[Any, Depends(_uploads)]
    ReaderDep = Annotated[Any, Depends(_reader)]
    KnowledgeSearchDep = Annotated[Any, Depends(_knowledge)]
    AnswererDep = Annotated[Any, Depends(_answerer)]
    AskSessionsDep = Annotated[Any, Depends(_ask_sessions)]
    FileToolsDep = Annotated[Any, Depends(_file_tools)]
    UsageWriterDep = Annotated[Any, Depends(_usage_writer)]
    WikiDep = Annotated[Any, Depends(_wiki)]
    SemanticDep = Annotated[bool, Depends(_semantic)]
    EndpointsDep = Annotated[Any, Depends(_endpoints)]
    RegistryDep = Annotated[Any, Depends(_registry)]
    CatalogDep = Annotated[Any, Depends(_catalog)]
    PoliciesDep = Annotated[Any, Depends(_policies)]
    OAuthDep = Annotated[Any, Depends(_oauth)]
    EgressDep = Annotated[Any, Depends(_egress)]
    ProfilesDep = Annotated[Any, Depends(_profiles)]
    DiscoveryDep = Annotated[Any, Depends(_discovery)]
    BrokerDep = Annotated[Any, Depends(_broker)]
    SettingsDep = Annotated[Any, Depends(_settings)]
    StoreDep = Annotated[Any, Depends(_store)]
    SecretsDep = Annotated[Any, Depends(_secrets)]
