"""The HTTP API's wire models, shared by the server (`gpupool.server`) and its typed client.

Pydantic lives here, at the edge. GPU amounts arrive as users write them (`0.5`, `"8G"`) and are
parsed once, by `gpupool.units`, into the core's integer units; responses carry both the integer
(`*_milli`, `*_mib`) and nothing else, so clients format them the same way.
"""
