"""The MCP protocol edge of published endpoints: stateless Streamable HTTP (``protocol``) behind the endpoint's
HTTP checks and authentication (``transport``), and the tool handlers (``tools``), which render the views REST
shares (``http/views``)."""
