"""The command line's grammar: every command, its arguments, its help and an example. Nothing but argparse is
imported here, so ``mcpbridge --help`` stays fast; each command names the function that runs it
(``module:function`` under :mod:`mcpbridge.cli`), imported only when it runs."""

# Over 400 lines: the help text and example of every command of the operator's command line.

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from mcpbridge import __version__

_ACTING = (
    "Every command but init, serve, `keys create --admin` and `services authorize` is a request to the REST API of "
    "a running mcpbridge (`mcpbridge serve`, or a deployed stack's API URL), with an API key: the server and key of "
    "`mcpbridge login URL` (a profile of the config file; --profile picks another), or MCPBRIDGE_URL and "
    "MCPBRIDGE_API_KEY. It acts as that key's user, with that key's authority, in the key's workspace; a platform "
    "admin's key (the one init printed) may name another workspace with --workspace."
)
_EXIT = "Exit status: 0 on success, 1 when the command failed (the message says why), 2 when it could not be parsed."
_BACKEND = (
    "init, serve, `keys create --admin` and `services authorize` act on the data itself: the backend comes from "
    "MCPBRIDGE_BACKEND, local (the default: the data directory) or aws (DynamoDB, KMS and S3, with the operator's "
    "AWS credentials and the MCPBRIDGE_* settings of the deployment)."
)
_CAPABILITIES = (
    "read, ask, wiki, write, manage_knowledge, manage_channels, manage_services, act_as, call_tools, manage_keys, "
    "approve_calls, manage_users, manage_workspaces"
)
DEFAULT_CALLBACK_PORT = 8080
AUTHORIZE_TIMEOUT = 600.0
"""How long ``services authorize`` waits for the browser by default: the lifetime of an authorization's state."""

Commands = Any  # argparse's private _SubParsersAction


def _wrapped(*paragraphs: str) -> str:
    """Paragraphs filled to 100 columns (the raw formatter keeps the examples' lines as written)."""
    return "\n\n".join(textwrap.fill(paragraph, width=100) for paragraph in paragraphs if paragraph)


class _Unused:
    """The grammar of a command the command line does not name: every call is taken and nothing is kept.

    Building all 60 commands' parsers costs more CPU than a REST command's request (argparse looks up a translation
    of its messages for each); so the command named is built whole, and every other one only as a name with its
    summary, which is all ``mcpbridge --help`` and argparse's "invalid choice" message show of it."""

    def __getattr__(self, _name: str) -> Any:
        return lambda *_args, **_kwargs: self


_SELECTED = "mcpbridge_selected"


def _named(commands: Commands, name: str) -> bool:
    """Whether to build ``name``'s whole grammar: it is the command named (or the parser was built whole)."""
    if isinstance(commands, _Unused):
        return False
    selected = getattr(commands, _SELECTED, name)
    return bool(selected == name)


def _summary_only(commands: Commands, name: str, summary: str) -> Any:
    if not isinstance(commands, _Unused):
        commands.add_parser(name, help=summary)
    return _Unused()


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of ``argv``'s command (with ``argv`` None: of every command)."""
    parser = argparse.ArgumentParser(
        prog="mcpbridge",
        description=_wrapped(
            "A two-way MCP hub: publish knowledge bases as MCP endpoints, broker agents' calls to external MCP "
            "servers.",
            _ACTING,
            _BACKEND,
        ),
        epilog="examples:\n  mcpbridge serve --port 8080\n  mcpbridge login http://127.0.0.1:8080\n"
        "  mcpbridge kb add handbook ./docs\n  mcpbridge calls pending\n\n"
        "`mcpbridge COMMAND --help` shows a command's options and an example.\n"
        f"{_EXIT}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"mcpbridge {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    if argv is not None:
        setattr(commands, _SELECTED, next((arg for arg in argv if not arg.startswith("-")), None))
    _add_setup(commands)
    _add_login(commands)
    _add_workspaces(commands)
    _add_users(commands)
    _add_keys(commands)
    _add_kb(commands)
    _add_sessions(commands)
    _add_endpoints(commands)
    _add_services(commands)
    _add_calls(commands)
    _add_agents(commands)
    _add_webhooks(commands)
    _add_rules(commands)
    return parser


def _leaf(
    commands: Commands,
    name: str,
    summary: str,
    example: str,
    run: str,
    *,
    workspace: bool = True,
    details: str = "",
    on_data: bool = False,
    remote: bool = True,
) -> argparse.ArgumentParser:
    """A command with its help, its example and the options every command takes."""
    if not _named(commands, name):
        return cast(argparse.ArgumentParser, _summary_only(commands, name, summary))
    description = _wrapped(f"{summary[0].upper()}{summary[1:]}.", details)
    leaf: argparse.ArgumentParser = commands.add_parser(
        name,
        help=summary,
        description=description,
        epilog=f"example:\n  {example}\n\n{_wrapped(_EXIT)}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if on_data:
        leaf.add_argument("--data-dir", type=Path, help="data directory (default ./.mcpbridge or MCPBRIDGE_DATA_DIR)")
    if remote:
        leaf.add_argument(
            "--profile", help="the profile of the config file to use (`mcpbridge login --profile`; default: default)"
        )
    leaf.add_argument("--json", action="store_true", help="print the result as JSON (the REST API's body)")
    if workspace:
        leaf.add_argument(
            "--workspace",
            metavar="WORKSPACE",
            help="the workspace to act in, by id or name (a platform admin's key only; default: the key's own)",
        )
    leaf.set_defaults(run=run)
    return leaf


def _group(commands: Commands, name: str, summary: str) -> Commands:
    if not _named(commands, name):
        return _summary_only(commands, name, summary)
    group = commands.add_parser(
        name,
        help=summary,
        description=_wrapped(f"{summary[0].upper()}{summary[1:]}.", _ACTING),
        epilog=f"`mcpbridge {name} COMMAND --help` shows a command's options and an example.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return group.add_subparsers(dest=f"{name}_command", metavar="COMMAND", required=True)


# ---------------------------------------------------------------------------------------------------- setup


def _add_setup(commands: Commands) -> None:
    _leaf(
        commands,
        "init",
        "create the platform's workspace, its admin user and an admin API key (once; run again, it creates nothing)",
        "mcpbridge init --data-dir ./.mcpbridge",
        "serving:init",
        workspace=False,
        on_data=True,
        remote=False,
    )
    serve = _leaf(
        commands,
        "serve",
        "run every HTTP surface (REST API, MCP endpoints, OAuth callback) in this process, initialising on first start",
        "mcpbridge serve --host 127.0.0.1 --port 8080",
        "serving:serve",
        workspace=False,
        on_data=True,
        remote=False,
        details="The port is bound before anything else happens: if it is taken, serve says so and exits with "
        'status 1, changing nothing. With --json, the first line is {"url", "workspace_id", "api_key", '
        '"created"} (the admin key only on the first start).',
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes that serve requests (default 1); one per core lets serve use a multi-core machine (each "
        "process has one interpreter lock); they share the data",
    )


# ---------------------------------------------------------------------------------------------------- tenants


def _add_workspaces(commands: Commands) -> None:
    actions = _group(commands, "workspaces", "the platform's workspaces, as their operator")
    _leaf(
        actions,
        "list",
        "every workspace with its status",
        "mcpbridge workspaces list",
        "tenants:workspaces_list",
        workspace=False,
    )
    show = _leaf(
        actions, "show", "one workspace", "mcpbridge workspaces show ws_...", "tenants:workspace_show", workspace=False
    )
    show.add_argument("target", metavar="WORKSPACE", help="the workspace's id (ws_...) or name")
    create = _leaf(
        actions,
        "create",
        "create a workspace, its first user and that user's unrestricted admin API key (shown once)",
        'mcpbridge workspaces create "Acme" --admin-name alice',
        "tenants:workspace_create",
        workspace=False,
    )
    create.add_argument("name", help="the workspace's name")
    create.add_argument("--admin-name", default="admin", help="the name of its first user (default admin)")
    rename = _leaf(
        actions,
        "rename",
        "rename a workspace",
        'mcpbridge workspaces rename ws_... "Acme Corp"',
        "tenants:workspace_rename",
        workspace=False,
    )
    rename.add_argument("target", metavar="WORKSPACE", help="the workspace's id (ws_...) or name")
    rename.add_argument("name", help="its new name")
    for name, summary in (
        ("disable", "refuse every key and endpoint token of a workspace from the next request on"),
        ("enable", "enable a disabled workspace"),
        ("delete", "delete a workspace and everything it holds (its keys are refused at once, the rest is purged)"),
    ):
        action = _leaf(
            actions, name, summary, f"mcpbridge workspaces {name} ws_...", f"tenants:workspace_{name}", workspace=False
        )
        action.add_argument("target", metavar="WORKSPACE", help="the workspace's id (ws_...) or name")


def _add_users(commands: Commands) -> None:
    actions = _group(commands, "users", "the users of a workspace")
    _leaf(
        actions,
        "list",
        "the workspace's users with their status",
        "mcpbridge users list --workspace Acme",
        "tenants:users_list",
    )
    create = _leaf(
        actions,
        "create",
        "create a user (without keys: give it one with `mcpbridge keys create --user`)",
        'mcpbridge users create "Bob" --workspace Acme',
        "tenants:user_create",
    )
    create.add_argument("name", help="the user's name")
    for name, summary in (
        ("show", "one user"),
        ("disable", "refuse the user's keys from the next request on"),
        ("enable", "enable a disabled user"),
        ("delete", "delete a user with its keys, OAuth tokens and sessions (its paused calls are cancelled)"),
    ):
        action = _leaf(actions, name, summary, f"mcpbridge users {name} usr_...", f"tenants:user_{name}")
        action.add_argument("user", metavar="USER", help="the user's id (usr_...) or name")


def _add_keys(commands: Commands) -> None:
    actions = _group(commands, "keys", "API keys")
    listing = _leaf(
        actions,
        "list",
        "the workspace's API keys (never the keys themselves)",
        "mcpbridge keys list",
        "tenants:keys_list",
    )
    listing.add_argument("--user", help="only this user's keys (by id or name)")
    create = _leaf(
        actions,
        "create",
        "mint an API key for a user of the workspace (shown once)",
        'mcpbridge keys create --user usr_... --name "Bob\'s agent" --capability call_tools',
        "tenants:key_create",
        on_data=True,
        details="--admin mints an unrestricted admin key straight in the data this machine holds: it is the way "
        "back after losing every admin key (no API key is needed, whatever keys exist). Without --admin, the key "
        f"is minted by the REST API's rules (never broader than the caller). Capabilities: {_CAPABILITIES}.",
    )
    create.add_argument("--admin", action="store_true", help="an unrestricted admin key (the recovery path)")
    create.add_argument(
        "--user",
        help="the user the key belongs to, by id or name (needed without --admin; default with --admin: the "
        "workspace's admin user)",
    )
    create.add_argument("--name", help="the key's name")
    create.add_argument("--role", choices=("viewer", "admin"), help="viewer (default) or admin")
    create.add_argument("--capability", action="append", metavar="CAPABILITY", help="grant only these (repeat)")
    create.add_argument("--kb", action="append", metavar="KB", help="reach only these knowledge bases (repeat)")
    revoke = _leaf(
        actions, "revoke", "revoke an API key at once", "mcpbridge keys revoke key_...", "tenants:key_revoke"
    )
    revoke.add_argument("key", metavar="KEY", help="the key's id (key_...)")


# ---------------------------------------------------------------------------------------------------- knowledge


def _add_kb(commands: Commands) -> None:
    actions = _group(commands, "kb", "knowledge bases: create, fill, search")
    _leaf(actions, "list", "the workspace's knowledge bases", "mcpbridge kb list", "knowledge:kb_list")
    show = _leaf(actions, "show", "one knowledge base", "mcpbridge kb show handbook", "knowledge:kb_show")
    show.add_argument("kb", metavar="KB", help="the knowledge base's id (kb_...) or name")
    create = _leaf(
        actions,
        "create",
        "create a knowledge base",
        'mcpbridge kb create handbook --description "HR"',
        "knowledge:kb_create",
    )
    create.add_argument("name", help="its name")
    create.add_argument("--description", default="", help="what it holds")
    create.add_argument("--language", default="auto", help="how keyword search analyses text (default auto)")
    add = _leaf(
        actions,
        "add",
        "add files, folders (their Markdown, text, HTML and PDF files) or URLs, and wait while they are indexed",
        "mcpbridge kb add handbook ./docs guide.pdf https://example.com/faq.html",
        "knowledge:kb_add",
        details="A progress bar (on a terminal) follows the parsing and indexing. Sources that do not exist are "
        "refused before anything is added. Exit status 1 when a document could not be added or indexed.",
    )
    add.add_argument("kb", metavar="KB", help="the knowledge base's id (kb_...) or name")
    add.add_argument("sources", nargs="+", metavar="SOURCE", help="a file, a folder or an http(s) URL")
    add.add_argument("--title", help="the document's title (one source only; default: its file name or URL)")
    add.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for indexing (default 900)")
    add.add_argument("--draft", action="store_true", help="add as drafts: kept out of search until published")
    add.add_argument("--tag", action="append", metavar="TAG", help="tag the documents (repeat)")
    add.add_argument("--folder", help="file them in this folder (docs/spec)")
    documents = _leaf(
        actions,
        "documents",
        "the documents of a knowledge base",
        "mcpbridge kb documents handbook",
        "knowledge:kb_documents",
    )
    documents.add_argument("kb", metavar="KB", help="the knowledge base's id (kb_...) or name")
    documents.add_argument("--keyword", help="only documents whose title has this word")
    _add_document_filters(documents)
    search = _leaf(
        actions,
        "search",
        "search knowledge bases from the terminal",
        'mcpbridge kb search "refund policy"',
        "knowledge:kb_search",
    )
    search.add_argument("query", help="what to look for")
    search.add_argument("--kb", action="append", metavar="KB", help="search only these (repeat; default: every one)")
    search.add_argument("--mode", choices=("hybrid", "semantic", "keyword"), default="hybrid", help="default hybrid")
    search.add_argument("--limit", type=int, default=10, help="results, 1 to 30 (default 10)")
    search.add_argument("--drafts", action="store_true", help="also search draft documents (shown as drafts)")
    _add_kb_ask(actions)
    _add_kb_filing(actions)
    _add_kb_shares(actions)
    delete = _leaf(
        actions,
        "delete",
        "delete a knowledge base and its documents",
        "mcpbridge kb delete handbook",
        "knowledge:kb_delete",
    )
    delete.add_argument("kb", metavar="KB", help="the knowledge base's id (kb_...) or name")


def _add_kb_shares(actions: Commands) -> None:
    share = _leaf(
        actions,
        "share",
        "share a knowledge base with another workspace",
        "mcpbridge kb share handbook ws_... --permission read",
        "kb_shares:kb_share",
        details="That workspace's endpoints and keys reach it once their scope lists it; write lets them add, update "
        "and delete its documents (new ones belong to this workspace). Sharing again changes the permission.",
    )
    share.add_argument("kb", metavar="KB", help="the knowledge base's id (kb_...) or name")
    share.add_argument("target", metavar="WORKSPACE", help="the workspace's id (ws_...)")
    share.add_argument("--permission", choices=("read", "write"), default="read", help="default read")
    shares = _leaf(
        actions,
        "shares",
        "the workspaces a knowledge base is shared with",
        "mcpbridge kb shares handbook",
        "kb_shares:kb_shares",
    )
    shares.add_argument("kb", metavar="KB", help="the knowledge base's id (kb_...) or name")
    unshare = _leaf(
        actions,
        "unshare",
        "withdraw a knowledge base's share with a workspace",
        "mcpbridge kb unshare handbook ws_...",
        "kb_shares:kb_unshare",
        details="Every later request from that workspace for it is refused, endpoints that still list it included.",
    )
    unshare.add_argument("kb", metavar="KB", help="the knowledge base's id (kb_...) or name")
    unshare.add_argument("target", metavar="WORKSPACE", help="the workspace's id (ws_...)")
    _leaf(
        actions,
        "shared",
        "knowledge bases other workspaces share with yours",
        "mcpbridge kb shared",
        "kb_shares:kb_shared",
    )


def _add_document_filters(documents: argparse.ArgumentParser) -> None:
    documents.add_argument("--status", choices=("published", "draft", "all"), help="default: published")
    documents.add_argument("--tag", help="only documents with this tag")
    documents.add_argument("--folder", help="only documents in this folder (docs/spec; '' is the root)")
    documents.add_argument("--subfolders", action="store_true", help="with --folder: its subfolders too")


def _add_kb_filing(actions: Commands) -> None:
    filing = _leaf(
        actions,
        "file",
        "publish, draft, tag or move a document",
        "mcpbridge kb file doc_... --status draft --tag design --folder docs/spec",
        "knowledge:kb_file",
        details="A draft is kept out of search (and endpoints) until it is published again; tags and folder change "
        "how it is filed only. --tag replaces the tags (repeat it; --tag '' clears them).",
    )
    filing.add_argument("document", metavar="DOCUMENT", help="the document's id (doc_...)")
    filing.add_argument("--status", choices=("published", "draft"))
    filing.add_argument("--tag", action="append", metavar="TAG", help="the document's tags (repeat)")
    filing.add_argument("--folder", help="a path like docs/spec ('' is the root)")
    chunk = _leaf(
        actions,
        "delete-chunk",
        "remove one chunk of a document from search",
        "mcpbridge kb delete-chunk doc_... 3",
        "knowledge:kb_delete_chunk",
    )
    chunk.add_argument("document", metavar="DOCUMENT", help="the document's id (doc_...)")
    chunk.add_argument("chunk", metavar="CHUNK", help="the chunk's id (doc_...#00003) or its number")


def _add_kb_ask(actions: Commands) -> None:
    ask = _leaf(
        actions,
        "ask",
        "ask a question answered from the knowledge bases",
        'mcpbridge kb ask "How do refunds work?"',
        "knowledge:kb_ask",
    )
    ask.add_argument("question", help="the question")
    ask.add_argument("--session", metavar="SESSION", help="continue this session (ses_..., from an earlier answer)")
    ask.add_argument("--kb", action="append", metavar="KB", help="use only these (repeat; default: every one)")


def _add_sessions(commands: Commands) -> None:
    actions = _group(commands, "sessions", "the ask sessions this key started: list, read, delete")
    _leaf(
        actions, "list", "the sessions, most recently used first", "mcpbridge sessions list", "knowledge:sessions_list"
    )
    show = _leaf(
        actions,
        "show",
        "one session with its questions and answers",
        "mcpbridge sessions show ses_...",
        "knowledge:sessions_show",
    )
    show.add_argument("session", metavar="SESSION", help="the session's id (ses_...)")
    delete = _leaf(
        actions, "delete", "delete a session", "mcpbridge sessions delete ses_...", "knowledge:sessions_delete"
    )
    delete.add_argument("session", metavar="SESSION", help="the session's id (ses_...)")


# ---------------------------------------------------------------------------------------------------- endpoints


_SERVICE_HELP = (
    "publish tools of an external MCP service (id or name): SERVICE:tool_a,tool_b, or SERVICE alone for every enabled "
    "tool (repeat; calls go through the service's policies and approvals)"
)


_EXTERNAL_TOOLS_HELP = "list each external tool, or search: offer search_tools and call_tool in their place"


def _add_endpoints(commands: Commands) -> None:
    actions = _group(commands, "endpoints", "MCP endpoints that publish knowledge bases")
    _leaf(actions, "list", "the workspace's MCP endpoints", "mcpbridge endpoints list", "publishing:endpoints_list")
    create = _leaf(
        actions,
        "create",
        "publish knowledge bases as an MCP endpoint: prints its token once and the client configs",
        'mcpbridge endpoints create "Claude" --kb handbook',
        "publishing:endpoint_create",
        details="The URL in the configs is under MCPBRIDGE_PUBLIC_BASE_URL, else http://127.0.0.1:8080 (where "
        "`mcpbridge serve` listens by default).",
    )
    create.add_argument("name", help="its name (the server name in client configs comes from it)")
    create.add_argument("--kb", action="append", metavar="KB", help="publish only these (repeat; default: every one)")
    create.add_argument("--tool", action="append", metavar="TOOL", help="offer only these tools (repeat)")
    create.add_argument("--description", default="", help="what it is for")
    create.add_argument("--rate-limit", type=int, default=60, help="calls per minute, 1 to 6000 (default 60)")
    create.add_argument("--agent", help="the agent profile its tool calls use (agt_...)")
    create.add_argument("--disabled", action="store_true", help="create it disabled")
    create.add_argument("--service", action="append", metavar="SERVICE[:TOOLS]", help=_SERVICE_HELP)
    create.add_argument("--external-tools", choices=("list", "search"), default="list", help=_EXTERNAL_TOOLS_HELP)
    update = _leaf(
        actions,
        "update",
        "change which external services' tools an endpoint publishes",
        "mcpbridge endpoints update Claude --service github:create_issue,list_issues",
        "publishing:endpoint_update",
    )
    update.add_argument("endpoint", metavar="ENDPOINT", help="the endpoint's id or name")
    update.add_argument("--service", action="append", metavar="SERVICE[:TOOLS]", help=_SERVICE_HELP)
    update.add_argument("--no-services", action="store_true", help="publish no external service any more")
    update.add_argument("--external-tools", choices=("list", "search"), help=_EXTERNAL_TOOLS_HELP)
    for name, summary in (
        ("show", "one endpoint (never its token)"),
        ("rotate", "issue a new token (the old one stops working at once): prints it once, with the client configs"),
        ("disable", "refuse the endpoint's token from the next request on"),
        ("enable", "enable a disabled endpoint"),
        ("delete", "delete an endpoint"),
    ):
        action = _leaf(actions, name, summary, f"mcpbridge endpoints {name} ep_...", f"publishing:endpoint_{name}")
        action.add_argument("endpoint", metavar="ENDPOINT", help="the endpoint's id or name")
    instructions = _leaf(
        actions,
        "instructions",
        "usage instructions written from the endpoint's tools (by the configured model, else a template)",
        "mcpbridge endpoints instructions Claude",
        "publishing:endpoint_instructions",
    )
    instructions.add_argument("endpoint", metavar="ENDPOINT", help="the endpoint's id or name")
    instructions.add_argument("--template", action="store_true", help="the template only, even with a model")


# ---------------------------------------------------------------------------------------------------- services


def _service_leaf(actions: Commands, name: str, summary: str, example: str, **kwargs: Any) -> argparse.ArgumentParser:
    leaf = _leaf(actions, name, summary, example, f"services:service_{name.replace('-', '_')}", **kwargs)
    leaf.add_argument("service", metavar="SERVICE", help="the service's id (svc_...) or name")
    return leaf


def _add_services(commands: Commands) -> None:
    actions = _group(commands, "services", "external MCP servers the workspace's agents call")
    _leaf(actions, "list", "the workspace's external MCP services", "mcpbridge services list", "services:services_list")
    _add_service_add(actions)
    imported = _leaf(
        actions,
        "import",
        "register every server of an `mcpServers` JSON file (Claude Desktop, Cursor...); stdio entries are refused",
        "mcpbridge services import ~/.cursor/mcp.json",
        "services:service_import",
    )
    imported.add_argument("file", type=Path, metavar="FILE", help='a JSON file with {"mcpServers": {...}} ("-": stdin)')
    _service_leaf(actions, "show", "one service (never a secret)", "mcpbridge services show github")
    for name, summary in (
        ("test", "connect to the service now: handshake, tools and resources"),
        ("refresh", "pull the service's tool catalog again"),
        ("tools", "the service's tools with the workspace's policy for each"),
    ):
        leaf = _service_leaf(actions, name, summary, f"mcpbridge services {name} github")
        leaf.add_argument(
            "--user", help="use this user's OAuth authorization, by id or name (a platform admin's key only)"
        )
    _add_policy(actions)
    _add_quarantine(actions)
    credentials = _service_leaf(
        actions,
        "credentials",
        "set a secret of the service (read from standard input, never echoed)",
        "mcpbridge services credentials github token < token.txt",
        details="FIELD is api_key, token (a bearer token) or client_secret (OAuth). The value is sealed at rest and "
        "never shown again.",
    )
    credentials.add_argument("field", choices=("api_key", "token", "client_secret"), metavar="FIELD")
    _service_leaf(
        actions, "delete", "delete a service with its policies and OAuth tokens", "mcpbridge services delete github"
    )
    _add_authorize(actions)


def _add_service_add(actions: Commands) -> None:
    add = _leaf(
        actions,
        "add",
        "register an external MCP server (Streamable HTTP or SSE; its URL is checked against the SSRF guard)",
        "mcpbridge services add github https://api.githubcopilot.com/mcp/ --auth oauth",
        "services:service_add",
        details="Secrets (an API key, a bearer token, a client secret) are set with `mcpbridge services "
        "credentials`, which reads them from standard input, never from the command line.",
    )
    add.add_argument("name", help="its name, unique in the workspace")
    add.add_argument("url", help="the server's MCP URL")
    add.add_argument("--transport", choices=("http-streamable", "sse"), default="http-streamable")
    add.add_argument("--auth", choices=("none", "api_key", "bearer", "oauth"), default="none", help="default none")
    add.add_argument("--api-key-header", help="the header an api_key goes in (default X-API-Key)")
    add.add_argument("--scope", action="append", metavar="SCOPE", help="OAuth scopes to ask for (repeat)")
    add.add_argument("--client-id", help="a pre-registered OAuth client id")
    add.add_argument(
        "--header",
        action="append",
        metavar="NAME:VALUE",
        help="a custom header (repeat); its value is sealed at rest, but a command line is visible to the machine's "
        "other users: give a secret with `services credentials` instead",
    )
    add.add_argument("--description", default="", help="what it is for")
    add.add_argument("--disabled", action="store_true", help="register it disabled")


def _add_quarantine(actions: Commands) -> None:
    held = _leaf(
        actions,
        "held",
        "the tools the quarantine holds (changed or new since approved), of one service or all",
        "mcpbridge services held github",
        "quarantine:held_list",
    )
    held.add_argument("service", nargs="?", metavar="SERVICE", help="the service's id (svc_...) or name")
    diff = _leaf(
        actions,
        "diff",
        "a held tool's approved and current definitions, and their difference",
        "mcpbridge services diff github create_issue",
        "quarantine:held_diff",
    )
    diff.add_argument("service", metavar="SERVICE", help="the service's id (svc_...) or name")
    diff.add_argument("tool", metavar="TOOL", help="the tool's name")
    approve = _leaf(
        actions,
        "approve-tool",
        "approve a held tool's current definition, named by the hash `services diff` shows",
        "mcpbridge services approve-tool github create_issue --hash 3f1c...",
        "quarantine:held_approve",
    )
    approve.add_argument("service", metavar="SERVICE", help="the service's id (svc_...) or name")
    approve.add_argument("tool", metavar="TOOL", help="the tool's name")
    approve.add_argument("--hash", required=True, help="the current hash of the definition you reviewed")
    rule = _leaf(
        actions,
        "new-tools",
        "whether tools appearing after the service's first catalog start held (hold) or not (approve)",
        "mcpbridge services new-tools github hold",
        "quarantine:held_new_tools",
    )
    rule.add_argument("service", metavar="SERVICE", help="the service's id (svc_...) or name")
    rule.add_argument("rule", choices=("hold", "approve"), metavar="RULE", help="hold or approve")


def _add_webhooks(commands: Commands) -> None:
    actions = _group(commands, "webhooks", "receivers told when a call waits for someone, is decided or times out")
    _leaf(actions, "list", "the workspace's webhooks", "mcpbridge webhooks list", "webhooks:webhooks_list")
    add = _leaf(
        actions,
        "add",
        "register a webhook; its signing secret is printed once",
        "mcpbridge webhooks add https://hooks.slack.com/services/... --format slack",
        "webhooks:webhook_add",
    )
    add.add_argument("url", metavar="URL", help="where events are POSTed (https unless allowlisted)")
    add.add_argument("--format", choices=("json", "slack", "teams"), default="json", help="the body's shape")
    add.add_argument(
        "--event",
        action="append",
        choices=("call.waiting", "call.decided", "call.timed_out"),
        help="an event to send (repeatable; default: all)",
    )
    add.add_argument("--description", default="", help="a note for admins")
    for name, summary, run in (
        ("show", "one webhook (never its secret)", "webhooks:webhook_show"),
        ("delete", "delete a webhook", "webhooks:webhook_delete"),
        ("deliveries", "a webhook's delivery log, newest first", "webhooks:webhook_deliveries"),
    ):
        leaf = _leaf(actions, name, summary, f"mcpbridge webhooks {name} whk_...", run)
        leaf.add_argument("webhook", metavar="WEBHOOK", help="the webhook's id (whk_...)")


def _add_policy(actions: Commands) -> None:
    policy = _service_leaf(
        actions,
        "policy",
        "set a tool's policy: enabled or not, approval required or not",
        "mcpbridge services policy github create_issue --require-approval",
    )
    policy.add_argument("tool", metavar="TOOL", help="the tool's name")
    enabled = policy.add_mutually_exclusive_group()
    enabled.add_argument("--enable", dest="enabled", action="store_const", const=True, help="offer the tool")
    enabled.add_argument("--disable", dest="enabled", action="store_const", const=False, help="hide the tool")
    approval = policy.add_mutually_exclusive_group()
    approval.add_argument(
        "--require-approval",
        dest="approval",
        action="store_const",
        const=True,
        help="pause each call until a person approves it",
    )
    approval.add_argument(
        "--no-approval", dest="approval", action="store_const", const=False, help="run calls without approval"
    )
    policy.add_argument("--pre-register", action="store_true", help="accept a tool the catalog does not list yet")


def _add_authorize(actions: Commands) -> None:
    authorize = _service_leaf(
        actions,
        "authorize",
        "authorize an OAuth service for a user: print the URL to open, then finish with the redirected URL",
        "mcpbridge services authorize github --user usr_... --listen",
        on_data=True,
        remote=False,
        details="It acts on the data itself (as init does), as the operator. "
        "Start an OAuth authorization of an external MCP service for a user and print the URL to open. "
        "Finish it by pasting the URL the browser was sent back to (stdin), with --redirected-url later, or with "
        "--listen (the browser comes back to this command on 127.0.0.1).",
    )
    authorize.add_argument("--user", help="the user to authorize for (default: the workspace's admin user)")
    finish = authorize.add_mutually_exclusive_group()
    finish.add_argument(
        "--redirected-url", metavar="URL", help="finish an authorization started earlier with the URL it redirected to"
    )
    finish.add_argument(
        "--listen", action="store_true", help="wait for the browser on 127.0.0.1 at the redirect URI's port"
    )
    authorize.add_argument(
        "--port",
        type=int,
        help="port of the redirect URI http://127.0.0.1:PORT/api/v1/mcp-oauth/callback when "
        f"MCPBRIDGE_PUBLIC_BASE_URL is unset (default {DEFAULT_CALLBACK_PORT})",
    )
    authorize.add_argument(
        "--timeout",
        type=float,
        default=AUTHORIZE_TIMEOUT,
        help=f"seconds to wait for the browser or the pasted URL (default {AUTHORIZE_TIMEOUT:g})",
    )
    authorize.set_defaults(run="authorize:cmd_services_authorize")


# ---------------------------------------------------------------------------------------------------- calls


def _add_calls(commands: Commands) -> None:
    actions = _group(commands, "calls", "agents' tool calls waiting for a person")
    pending = _leaf(
        actions,
        "pending",
        "the calls waiting for an approval or an authorization",
        "mcpbridge calls pending --all-workspaces",
        "calls:calls_pending",
        details="The key's user's own calls (every one of the workspace for an admin key with approve_calls). With "
        "a platform admin's key, it also says in which other workspaces calls wait; --all-workspaces lists them all.",
    )
    pending.add_argument(
        "--all-workspaces", action="store_true", help="every workspace's waiting calls (a platform admin's key only)"
    )
    audit = _leaf(
        actions,
        "list",
        "the audit trail: every external tool call kept (agents' and published endpoints'), newest first",
        "mcpbridge calls list --tool echo --since 2026-12-01T00:00:00Z",
        "calls:calls_list",
        details="Arguments are shown as a digest, never their values. An admin key sees the workspace's calls, "
        "other keys their own.",
    )
    for option, name, text in (
        ("--since", "since", "calls made at or after this ISO 8601 time"),
        ("--until", "until", "calls made before this ISO 8601 time"),
        ("--user", "user_id", "calls of this user (id)"),
        ("--service", "service_id", "calls of this service (svc_...)"),
        ("--tool", "tool", "calls of this tool (its name at the service)"),
        ("--outcome", "outcome", "completed, failed, rejected, cancelled, uncertain, or a waiting status"),
        ("--endpoint", "endpoint_id", "calls made through this published endpoint (ep_...)"),
        ("--agent", "agent_id", "calls made under this agent profile (agt_...)"),
        ("--rule", "rule_id", "calls decided by this rule of the workspace's rules"),
    ):
        audit.add_argument(option, dest=name, help=text)
    show = _leaf(actions, "show", "one tool call", "mcpbridge calls show call_...", "calls:call_show")
    show.add_argument("call", metavar="CALL", help="the call's id")
    approve = _leaf(
        actions,
        "approve",
        "approve a call waiting for approval (it runs next)",
        'mcpbridge calls approve call_... --args \'{"text": "hi"}\'',
        "calls:call_approve",
        details="Only the call's owner or an approver may resolve it: the key's user must own the call or hold an "
        "admin key with approve_calls (a platform admin's key is one in any workspace).",
    )
    approve.add_argument("call", metavar="CALL", help="the call's id")
    approve.add_argument("--args", metavar="JSON", help="a JSON object replacing the call's arguments")
    approve.add_argument("--reason", help="why (kept on the call)")
    reject = _leaf(
        actions,
        "reject",
        "reject a call waiting for approval, or cancel one waiting for an authorization",
        'mcpbridge calls reject call_... --reason "not today"',
        "calls:call_reject",
    )
    reject.add_argument("call", metavar="CALL", help="the call's id")
    reject.add_argument("--reason", help="why (the agent is told)")


# ---------------------------------------------------------------------------------------------------- login


def _add_login(commands: Commands) -> None:
    login = _leaf(
        commands,
        "login",
        "log in to a running mcpbridge: check an API key against it and save both as a profile",
        "mcpbridge login http://127.0.0.1:8080 < key.txt",
        "session:login",
        workspace=False,
        details="The key is asked for (never echoed) on a terminal, else read from standard input; it is checked "
        "with GET /api/v1/me, then saved with the URL in $XDG_CONFIG_HOME/mcpbridge/config.json (~/.config/... by "
        "default; MCPBRIDGE_CONFIG names another file), readable by you only. MCPBRIDGE_URL and MCPBRIDGE_API_KEY, "
        "when set, come before the profile.",
    )
    login.add_argument("url", metavar="URL", help="the server: http://127.0.0.1:8080 for `mcpbridge serve`, or ApiUrl")
    _leaf(
        commands,
        "whoami",
        "the server, user, workspace and key the commands use",
        "mcpbridge whoami",
        "session:whoami",
        workspace=False,
    )


# ---------------------------------------------------------------------------------------------------- agents


def _add_agents(commands: Commands) -> None:
    actions = _group(commands, "agents", "agent profiles and the tools they may call")
    _leaf(actions, "list", "the workspace's agent profiles", "mcpbridge agents list", "agents:agents_list")
    tools = _leaf(
        actions,
        "tools",
        "the tools an agent may call",
        "mcpbridge agents tools --service everything",
        "agents:agents_tools",
    )
    tools.add_argument("--agent", help="the agent profile, by id (agt_...) or name (default: every service)")
    tools.add_argument("--service", help="only this service's tools (id or name)")
    tools.add_argument("--query", help="what the agent wants to do, any language: the best matching tools, best first")
    tools.add_argument("--mode", choices=("hybrid", "semantic", "keyword"), default="hybrid", help="default hybrid")
    tools.add_argument("--limit", type=int, default=10, help="with --query: results, 1 to 50 (default 10)")
    describe = _leaf(
        actions,
        "describe",
        "a tool's full definition and input schema, as an agent sees it",
        "mcpbridge agents describe everything echo",
        "agents:agents_describe",
    )
    _tool_arguments(describe)
    _add_agent_reads(actions)
    call = _leaf(
        commands,
        "call",
        "call a tool through the agent broker (its policy, approvals and OAuth apply), and wait for its outcome",
        'mcpbridge call everything echo --args \'{"message": "hi"}\'',
        "agents:call",
        details="A call that waits for an approval or an OAuth authorization is followed for --wait seconds (the "
        "pause and how to resolve it are printed on standard error); after that the command prints the pause and "
        "exits with status 3 (`mcpbridge calls show CALL` shows the outcome later). Exit status 1 when the call "
        "failed or was rejected. The key needs call_tools.",
    )
    _tool_arguments(call)
    call.add_argument("--args", metavar="JSON", help="the tool's arguments, a JSON object (default {})")
    call.add_argument("--as-user", metavar="USER", help="act for this user, by id or name (the key needs act_as)")
    call.add_argument(
        "--wait", type=float, default=60.0, help="seconds to wait for a paused call (default 60; 0: do not wait)"
    )


def _add_agent_reads(actions: Commands) -> None:
    def service(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("service", metavar="SERVICE", help="the service, by id (svc_...) or name")
        parser.add_argument("--agent", help="the agent profile, by id (agt_...) or name (default: every service)")

    service(
        _leaf(
            actions,
            "resources",
            "the resources a service lists now to you",
            "mcpbridge agents resources everything",
            "agent_reads:agents_resources",
        )
    )
    read = _leaf(
        actions,
        "read",
        "read one of a service's resources (at most 4 MiB)",
        "mcpbridge agents read everything demo://resource/static/document/architecture.md",
        "agent_reads:agents_read",
    )
    service(read)
    read.add_argument("uri", metavar="URI", help="the resource's URI, as listed")
    service(
        _leaf(
            actions,
            "prompts",
            "the prompts a service lists now to you",
            "mcpbridge agents prompts everything",
            "agent_reads:agents_prompts",
        )
    )
    prompt = _leaf(
        actions,
        "prompt",
        "a service's prompt, filled with arguments",
        'mcpbridge agents prompt everything args-prompt --args \'{"city": "Lyon"}\'',
        "agent_reads:agents_prompt",
    )
    service(prompt)
    prompt.add_argument("name", metavar="NAME", help="the prompt's name, as listed")
    prompt.add_argument("--args", metavar="JSON", help="the prompt's arguments, a JSON object of strings")
    refresh = _leaf(
        actions,
        "refresh",
        "pull the agent's catalog again, as you see it (your own for per-user OAuth services); rate limited",
        "mcpbridge agents refresh --service everything",
        "agent_reads:agents_refresh",
        details="Exit status 1 when a service's pull failed or did not finish in time.",
    )
    refresh.add_argument("--service", help="only this service (id or name)")
    refresh.add_argument("--agent", help="the agent profile, by id (agt_...) or name (default: every service)")


# ---------------------------------------------------------------------------------------------------- rules


def _add_rules(commands: Commands) -> None:
    actions = _group(commands, "rules", "the workspace's rules for tool calls (allow, deny, ask, redact)")
    show = _leaf(
        actions, "show", "the rules, in the order they are evaluated", "mcpbridge rules show", "rules:rules_show"
    )
    show.add_argument("--version", type=int, help="an earlier version (what a call's decision names)")
    save = _leaf(
        actions,
        "set",
        "save a rule set written as JSON as the next version",
        "mcpbridge rules set rules.json",
        "rules:rules_set",
        details='FILE holds {"mode", "default", "rules"} ("-": standard input). Every rule is checked first: a wrong '
        "field is named and nothing is saved.",
    )
    save.add_argument("file", metavar="FILE", help="the rule set (JSON), or - for standard input")
    save.add_argument("--expected-version", type=int, help="the version FILE was written against (default: current)")
    mode = _leaf(
        actions,
        "mode",
        "enforce the rules, or only record what they would do",
        "mcpbridge rules mode log_only",
        "rules:rules_mode",
    )
    mode.add_argument("mode", choices=["enforce", "log_only"], help="enforce or log_only")
    groups = _group(commands, "groups", "groups of users that rules name (callers, approvers)")
    _leaf(groups, "list", "the workspace's groups", "mcpbridge groups list", "rules:groups_list")
    for name, summary, run in (
        ("show", "a group and its members", "rules:groups_show"),
        ("create", "create a group", "rules:groups_create"),
        ("set", "replace a group's members (and description)", "rules:groups_set"),
        ("delete", "delete a group no rule names", "rules:groups_delete"),
    ):
        example = f"mcpbridge groups {name} finance" + (" --member usr_..." if name in ("create", "set") else "")
        leaf = _leaf(groups, name, summary, example, run)
        leaf.add_argument("name", metavar="NAME", help="the group's name")
        if name in ("create", "set"):
            leaf.add_argument("--member", action="append", metavar="USER", help="a member's user id (repeat)")
            leaf.add_argument("--description", help="what the group is for")


def _tool_arguments(leaf: argparse.ArgumentParser) -> None:
    leaf.add_argument("service", metavar="SERVICE", help="the service's id (svc_...) or name")
    leaf.add_argument("tool", metavar="TOOL", help="the tool's name as the service lists it")
    leaf.add_argument("--agent", help="the agent profile, by id (agt_...) or name (default: every service)")
