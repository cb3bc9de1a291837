"""Not production code: what the demo, the benchmarks and the tests drive the gateway with.
Installed with the package because ``gateway demo`` needs it.

* :mod:`gateway_tools.fault_proxy` - a fault-injecting proxy in front of WordPress.
* :mod:`gateway_tools.client` - a plain HTTP client of the gateway's API, calling it the way
  an n8n HTTP Request node does.
* :mod:`gateway_tools.mcp_demo` - ``gateway demo --mcp``: the main job over MCP with the
  official SDK's stdio client.
"""
