"""The web console at ``/console``: static pages and small ES modules (``static/``) that call the REST API.

The pages are plain files shipped in the package (no template, no build step, no CDN); every action they take is a
request to ``/api/v1/...`` authenticated by the console's session cookie (:mod:`mcpbridge.http.console.session`), so a
signed-in person sees and does exactly what the key they signed in with allows. The routes are in
:mod:`mcpbridge.http.routes.console`.
"""
