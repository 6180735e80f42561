#!/usr/bin/env python3
"""Drives Kiln's MCP server (`/mcp`) with the official MCP Python SDK, for
kiln/tests/mcp.rs: connects, lists the tools, calls each tool of the plan,
and prints what it got as JSON.

The plan comes as JSON on standard input:

    {"url": "http://127.0.0.1:PORT/mcp", "key": "kiln_…",
     "mode": "legacy" | "auto",
     "calls": [{"tool": "top_functions", "arguments": {...}}, ...]}

`legacy` is the handshake era: `ClientSession.initialize()` over
`streamable_http_client`. `auto` is the SDK's own default (`Client`):
`server/discover` first, the per-request envelope of 2026-07-28 when the
server offers it, else the handshake. The output:

    {"protocol_version": ..., "server": {"name", "version"},
     "tools": [{"name", "input_schema", "output_schema"}],
     "calls": [{"tool", "is_error", "text", "structured"} or {"tool", "error": {"code", "message"}}]}
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError


def http_client(key):
    return httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120)


async def call_all(call_tool, calls):
    out = []
    for call in calls:
        try:
            result = await call_tool(call["tool"], call.get("arguments") or {})
        except MCPError as e:
            out.append({"tool": call["tool"], "error": {"code": e.code, "message": e.message}})
            continue
        text = "".join(block.text for block in result.content if getattr(block, "type", "") == "text")
        out.append(
            {
                "tool": call["tool"],
                "is_error": bool(result.is_error),
                "text": text,
                "structured": result.structured_content,
            }
        )
    return out


def tools_of(listed):
    return [
        {"name": t.name, "input_schema": t.input_schema, "output_schema": t.output_schema}
        for t in listed.tools
    ]


async def legacy(plan):
    async with http_client(plan["key"]) as http:
        async with streamable_http_client(plan["url"], http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                tools = tools_of(await session.list_tools())
                calls = await call_all(session.call_tool, plan["calls"])
                return {
                    "protocol_version": init.protocol_version,
                    "server": {"name": init.server_info.name, "version": init.server_info.version},
                    "tools": tools,
                    "calls": calls,
                }


async def auto(plan):
    async with http_client(plan["key"]) as http:
        async with Client(streamable_http_client(plan["url"], http_client=http)) as client:
            info = client.server_info
            tools = tools_of(await client.list_tools())
            calls = await call_all(client.call_tool, plan["calls"])
            return {
                "protocol_version": client.protocol_version,
                "server": {"name": info.name, "version": info.version} if info else None,
                "tools": tools,
                "calls": calls,
            }


def main():
    plan = json.load(sys.stdin)
    run = {"legacy": legacy, "auto": auto}[plan.get("mode", "legacy")]
    print(json.dumps(asyncio.run(run(plan))))


if __name__ == "__main__":
    main()
