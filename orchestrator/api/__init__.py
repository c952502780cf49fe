"""HTTP API: thin routers over the domain and db layers."""
