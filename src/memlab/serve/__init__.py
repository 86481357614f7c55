"""Live agents: an MCP server, HTTP bulk ingest and recordings of what they did.

:class:`~memlab.serve.service.MemoryService` owns the store, the pipeline, the principal and the
recorder and implements every tool; :mod:`memlab.serve.mcp_server` (stdio and Streamable HTTP)
and :mod:`memlab.serve.http` (bulk ingest) are thin transports over it;
:mod:`memlab.serve.recording` appends every write and recall to a dataset in format v1.
"""
