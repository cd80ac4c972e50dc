"""HTTP surfaces: FastAPI app factories, routers and the problem+json mapping."""
