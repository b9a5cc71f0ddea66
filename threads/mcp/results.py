"""An MCP tool's result as the model gets it: text, with images as files beside it.

Text blocks are joined; an image becomes a :class:`~threads.messages.FilePart`
(kept on disk by an :class:`~threads.tools.images.ImageStore`, shown to
models that accept images as a ``data:`` URL) and a line naming it; an
embedded text resource becomes its text under a line naming its URI; a
binary resource, an audio clip or a resource link becomes a line saying what
it is. ``structured_content`` alone (no blocks) is given as JSON. An
``is_error`` result is a tool error.
"""

from __future__ import annotations

import base64
import binascii

import orjson
from mcp_types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from threads.agent.tools import ToolOutput
from threads.messages import FilePart
from threads.tools.images import ImageStore


async def to_output(result: CallToolResult, label: str, images: ImageStore | None) -> ToolOutput:
    """The tool output for ``result`` of the tool ``label``."""
    lines: list[str] = []
    files: list[FilePart] = []
    for block in result.content:
        if isinstance(block, TextContent):
            lines.append(block.text)
        elif isinstance(block, ImageContent):
            lines.append(await _image(block, label, images, files))
        elif isinstance(block, EmbeddedResource):
            resource = block.resource
            if isinstance(resource, TextResourceContents):
                lines.append(f"[resource {resource.uri}]\n{resource.text}")
            elif isinstance(resource, BlobResourceContents):
                kind = resource.mime_type or "binary data"
                lines.append(f"[resource {resource.uri}: {kind}, not shown]")
        elif isinstance(block, ResourceLink):
            lines.append(f"[resource link {block.uri}: {block.name}]")
        elif isinstance(block, AudioContent):
            lines.append(f"[audio ({block.mime_type}), not shown]")
    if not lines and result.structured_content is not None:
        lines.append(orjson.dumps(result.structured_content, default=str).decode())
    return ToolOutput(
        content="\n".join(lines) or "(no output)", is_error=result.is_error, files=tuple(files)
    )


async def _image(
    block: ImageContent, label: str, images: ImageStore | None, files: list[FilePart]
) -> str:
    try:
        data = base64.b64decode(block.data, validate=True)
    except (binascii.Error, ValueError):
        return f"[an image ({block.mime_type}) that was not valid base64; not shown]"
    if images is None:
        return f"[an image ({block.mime_type}, {len(data)} bytes), not shown]"
    part = await images.keep(data, block.mime_type, name=f"{label} image {len(files) + 1}")
    files.append(part)
    return f"[image: {part.name} ({part.media_type}, {part.size} bytes), attached]"
